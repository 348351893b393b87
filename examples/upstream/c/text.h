#ifndef TEXT_H
#define TEXT_H
unsigned count_words(const char *s);
unsigned long checksum(const char *s);
unsigned mix(unsigned x);
int never_called(int x);
void register_plugin(const char *name);
const char *plugin_name(unsigned i);
unsigned plugin_count(void);
unsigned shout_level(void);
void add_volume(unsigned v);
unsigned volume_extra(void);
unsigned quiet_level(void);
unsigned echo_twice(unsigned x);
#endif
