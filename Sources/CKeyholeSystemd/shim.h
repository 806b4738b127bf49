#ifndef CKEYHOLE_SYSTEMD_SHIM_H
#define CKEYHOLE_SYSTEMD_SHIM_H

#include <stdint.h>
#include <stdlib.h>
#include <sys/uio.h>
#include <systemd/sd-daemon.h>
#include <systemd/sd-journal.h>

/* SD_LISTEN_FDS_START is a macro: Swift sees it through this function. */
static inline int ckeyhole_sd_listen_fds_start(void) { return SD_LISTEN_FDS_START; }

#endif
