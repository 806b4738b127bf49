#include "CKeyholeTOML.h"

#include <new>

extern "C" void ckeyhole_toml_release_emptied_table(void *table) {
    // `new toml::table(...)` took it from the global operator new: the global operator delete is the
    // one that matches (free() would not be, to the sanitizers and to the language).
    ::operator delete(table);
}
