#ifndef REGISTRY_H
#define REGISTRY_H
typedef int (*plugin_fn)(int);
void register_plugin(const char *name, plugin_fn fn);
#endif
