#include "text.h"

static int is_space(char c) { return c == ' ' || c == '\n' || c == '\t'; }

unsigned count_words(const char *s) {
  unsigned n = 0;
  int in = 0;
  for (; *s; ++s) {
    if (is_space(*s)) {
      in = 0;
    } else if (!in) {
      in = 1;
      ++n;
    }
  }
  return n;
}
