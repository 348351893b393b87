#include "shapes.hpp"

namespace {
struct Circle : Shape {
    double r;
    explicit Circle(double r) : r(r) {}
    double area() const override { return 3.141592653589793 * r * r; }
    std::string name() const override { return "circle(" + std::to_string(r).substr(0, 4) + ")"; }
};
}  // namespace

std::unique_ptr<Shape> make_circle(double r) { return std::make_unique<Circle>(r); }
