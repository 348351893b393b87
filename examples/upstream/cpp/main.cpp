#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include "shapes.h"
extern "C" {
#include "text.h"
}

extern int circle_linked, square_linked;

int main(int argc, char **argv) {
  int linked = circle_linked + square_linked;  // pulls both members in
  auto shapes = registry();
  std::sort(shapes.begin(), shapes.end(),
            [](const Shape &a, const Shape &b) { return a.name < b.name; });
  std::printf("shapes %d %zu\n", linked, shapes.size());
  for (int i = 1; i < argc; ++i) {
    try {
      double size = parse_size(argv[i]);
      for (const Shape &s : shapes)
        std::printf("%s %s %.3f\n", s.name.c_str(), argv[i], s.area(size));
    } catch (const std::invalid_argument &e) {
      std::printf("error: %s\n", e.what());
    }
  }
  std::printf("words %u\n", count_words("shapes and words"));
  return 0;
}
