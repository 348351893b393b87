#include <stdio.h>
#include "text.h"

int main(int argc, char **argv) {
  const char *text = argc > 1 ? argv[1] : "the quick brown fox jumps over the lazy dog";
  printf("words %u\n", count_words(text));
  printf("checksum %lu\n", checksum(text));
  printf("volume %u\n", echo_twice(shout_level()) + volume_extra());
  for (unsigned i = 0; i < plugin_count(); ++i)
    printf("plugin %s\n", plugin_name(i));
  return 0;
}
