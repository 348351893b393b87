#include "text.h"

unsigned long checksum(const char *s) {
  unsigned long h = 5381;
  for (; *s; ++s)
    h = h * 33 + mix((unsigned char)*s);
  return h;
}
