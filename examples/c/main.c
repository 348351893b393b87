#include <stdio.h>
#include "stats.h"

int main(void) {
    const char *text = "distributed thin link time optimisation splits one link into many small actions";
    double lengths[64];
    size_t n = text_words(text, lengths, 64);
    printf("words=%zu mean=%.3f stddev=%.3f hash=%08x\n", n, stats_mean(lengths, n),
           stats_stddev(lengths, n), text_hash(text));
    return 0;
}
