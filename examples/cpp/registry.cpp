#include "shapes.hpp"

std::vector<std::unique_ptr<Shape>> default_shapes() {
    std::vector<std::unique_ptr<Shape>> v;
    v.push_back(make_circle(1.5));
    v.push_back(make_polygon(4, 2.0));
    v.push_back(make_polygon(6, 1.0));
    return v;
}
