#include <stdexcept>
#include "shapes.h"

std::vector<Shape> &registry() {
  static std::vector<Shape> shapes;
  return shapes;
}

double parse_size(const std::string &text) {
  std::size_t used = 0;
  double value = std::stod(text, &used);
  if (used != text.size() || value < 0)
    throw std::invalid_argument("not a size: " + text);
  return value;
}
