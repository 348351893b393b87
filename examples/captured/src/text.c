unsigned mix(unsigned h, unsigned v);
unsigned word_hash(const char *word) {
  unsigned h = 0;
  while (*word) h = mix(h, (unsigned char)*word++);
  return h;
}
