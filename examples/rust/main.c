#include <stdint.h>
#include <stdio.h>

uint64_t textkit_fnv1a(const char *s);
size_t textkit_distinct_words(const char *s);

int main(void) {
    const char *text = "the cat and the dog and the bird";
    printf("fnv1a=%016llx distinct=%zu\n", (unsigned long long)textkit_fnv1a(text), textkit_distinct_words(text));
    return 0;
}
