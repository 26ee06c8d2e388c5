#ifndef ANCSD_CMOSQUITTO_SHIM_H
#define ANCSD_CMOSQUITTO_SHIM_H
#include <mosquitto.h>

/* ancsd does not link libmosquitto: MQTT/Libmosquitto.swift loads it with dlopen when the first
 * MQTT client is made. Each type below is that of a function it looks up, taken from the
 * prototype above, so a lookup under the wrong type does not compile. */
#define ANCSD_MOSQUITTO_FUNCTION(name) typedef __typeof__(&mosquitto_##name) ancsd_mosquitto_##name##_fn;
ANCSD_MOSQUITTO_FUNCTION(lib_init)
ANCSD_MOSQUITTO_FUNCTION(new)
ANCSD_MOSQUITTO_FUNCTION(destroy)
ANCSD_MOSQUITTO_FUNCTION(int_option)
ANCSD_MOSQUITTO_FUNCTION(username_pw_set)
ANCSD_MOSQUITTO_FUNCTION(tls_set)
ANCSD_MOSQUITTO_FUNCTION(will_set)
ANCSD_MOSQUITTO_FUNCTION(connect_callback_set)
ANCSD_MOSQUITTO_FUNCTION(disconnect_callback_set)
ANCSD_MOSQUITTO_FUNCTION(publish_callback_set)
ANCSD_MOSQUITTO_FUNCTION(message_callback_set)
ANCSD_MOSQUITTO_FUNCTION(connect_bind_async)
ANCSD_MOSQUITTO_FUNCTION(socket)
ANCSD_MOSQUITTO_FUNCTION(want_write)
ANCSD_MOSQUITTO_FUNCTION(loop_read)
ANCSD_MOSQUITTO_FUNCTION(loop_write)
ANCSD_MOSQUITTO_FUNCTION(loop_misc)
ANCSD_MOSQUITTO_FUNCTION(subscribe)
ANCSD_MOSQUITTO_FUNCTION(publish)
ANCSD_MOSQUITTO_FUNCTION(disconnect)
ANCSD_MOSQUITTO_FUNCTION(strerror)
ANCSD_MOSQUITTO_FUNCTION(connack_string)
#undef ANCSD_MOSQUITTO_FUNCTION
#endif
