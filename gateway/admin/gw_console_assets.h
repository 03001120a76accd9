/*
 * gw_console_assets.h: the admin console's files (gateway/admin/console/), compiled into the
 * binary. The table is generated into the build tree at build time (cmake/embed_assets.cmake);
 * gw_admin_console.c serves each row at its path. Private to the admin.
 */
#ifndef HERALD_GATEWAY_GW_CONSOLE_ASSETS_H
#define HERALD_GATEWAY_GW_CONSOLE_ASSETS_H

#include <stddef.h>

typedef struct gw_console_asset_s {
    const char *path;         /* "/console" for index.html, else "/console/<file name>" */
    const char *content_type; /* from the file's extension */
    const unsigned char *data;
    size_t len;
} gw_console_asset_t;

extern const gw_console_asset_t gw_console_assets[];
extern const size_t gw_console_n_assets;

#endif
