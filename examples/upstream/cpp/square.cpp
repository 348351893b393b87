#include "shapes.h"

namespace {
double area(double s) { return s * s; }
struct Register {
  Register() { registry().push_back({"square", area}); }
} registered;
}  // namespace

int square_linked = 1;
