/* The captured example's program: a checksum over a word list. */
#include <stdio.h>

unsigned mix(unsigned h, unsigned v);   /* lib/util.c, in a regular archive */
unsigned word_hash(const char *word);   /* thin/text.c, in a thin archive */
unsigned rotate3(unsigned x);           /* src/fast.S, a native object */

int main(int argc, char **argv) {
  unsigned h = 2166136261u;
  for (int i = 1; i < argc; i++)
    h = mix(h, word_hash(argv[i]));
  printf("%08x\n", rotate3(h));
  return 0;
}
