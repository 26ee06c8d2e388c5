#ifndef ANCSD_CMOSQUITTO_SHIM_H
#define ANCSD_CMOSQUITTO_SHIM_H
#include <mosquitto.h>
#endif
