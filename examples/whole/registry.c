#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "registry.h"

struct plugin { const char *name; plugin_fn fn; };
static struct plugin plugins[16];
static int count;

void register_plugin(const char *name, plugin_fn fn) {
    if (count < 16) plugins[count++] = (struct plugin){name, fn};
}

static int by_name(const void *a, const void *b) {
    return strcmp(((const struct plugin *)a)->name, ((const struct plugin *)b)->name);
}

void run_plugins(int x) {
    qsort(plugins, (size_t)count, sizeof plugins[0], by_name);
    for (int i = 0; i < count; i++) printf("%s(%d) = %d\n", plugins[i].name, x, plugins[i].fn(x));
}
