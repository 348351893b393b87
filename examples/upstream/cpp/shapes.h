#pragma once
#include <string>
#include <vector>

struct Shape {
  std::string name;
  double (*area)(double);
};

// Filled by static constructors, one per shape's translation unit.
std::vector<Shape> &registry();
double parse_size(const std::string &text);  // throws std::invalid_argument
