#include "shapes.h"

namespace {
double area(double r) { return 3.14159265358979 * r * r; }
struct Register {
  Register() { registry().push_back({"circle", area}); }
} registered;
}  // namespace

int circle_linked = 1;
