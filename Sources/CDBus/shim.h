#ifndef ANCSD_CDBUS_SHIM_H
#define ANCSD_CDBUS_SHIM_H
#include <dbus/dbus.h>
#endif
