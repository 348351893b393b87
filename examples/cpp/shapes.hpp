#pragma once
#include <memory>
#include <string>
#include <vector>

struct Shape {
    virtual ~Shape() = default;
    virtual double area() const = 0;
    virtual std::string name() const = 0;
};

std::unique_ptr<Shape> make_circle(double r);
std::unique_ptr<Shape> make_polygon(int sides, double side);
std::vector<std::unique_ptr<Shape>> default_shapes();
