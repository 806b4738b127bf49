#ifndef CKEYHOLE_TOML_H
#define CKEYHOLE_TOML_H

#ifdef __cplusplus
extern "C" {
#endif

/// Gives back the storage of a table that TOMLKit's C interface made with `new`
/// (`tableCreateFromString`) and that `tableClear` has emptied. That interface has no way to delete
/// a table; C++'s matching deallocation is `operator delete`, which this calls. Emptied, a table
/// parsed from a string owns nothing else (its map is empty and it has no source path), so this is
/// what its destructor and `delete` would do.
void ckeyhole_toml_release_emptied_table(void *table);

#ifdef __cplusplus
}
#endif

#endif
