#include <algorithm>
#include <cstdio>
#include "shapes.hpp"

int main() {
    auto shapes = default_shapes();
    std::sort(shapes.begin(), shapes.end(), [](const auto &a, const auto &b) { return a->area() < b->area(); });
    double total = 0;
    for (const auto &s : shapes) {
        std::printf("%-12s %8.3f\n", s->name().c_str(), s->area());
        total += s->area();
    }
    std::printf("total        %8.3f\n", total);
    return 0;
}
