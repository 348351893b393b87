#include <stddef.h>
#include <stdio.h>
#include "text.h"

size_t linestats_longest(const char *text);
size_t linestats_distinct(const char *text);

int main(int argc, char **argv) {
  const char *text = argc > 1 ? argv[1] : "b\na\nb\n";
  printf("lines %zu longest %zu\n", linestats_distinct(text), linestats_longest(text));
  printf("words %u\n", count_words(text));
  return 0;
}
