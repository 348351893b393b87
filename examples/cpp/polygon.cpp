#include <cmath>
#include "shapes.hpp"

namespace {
struct Polygon : Shape {
    int sides;
    double side;
    Polygon(int n, double s) : sides(n), side(s) {}
    double area() const override { return sides * side * side / (4 * std::tan(3.141592653589793 / sides)); }
    std::string name() const override { return std::to_string(sides) + "-gon"; }
};
}  // namespace

std::unique_ptr<Shape> make_polygon(int sides, double side) { return std::make_unique<Polygon>(sides, side); }
