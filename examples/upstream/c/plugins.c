#include "text.h"

static const char *names[8];
static unsigned count;

void register_plugin(const char *name) {
  if (count < 8)
    names[count++] = name;
}
const char *plugin_name(unsigned i) { return i < count ? names[i] : "?"; }
unsigned plugin_count(void) { return count; }

static unsigned extra;

void add_volume(unsigned v) { extra += v; }
unsigned volume_extra(void) { return extra; }
