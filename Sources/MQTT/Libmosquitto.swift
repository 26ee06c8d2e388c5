import CMosquitto
#if canImport(Glibc)
import Glibc
#endif

/// libmosquitto could not be loaded, or lacks a function the client needs.
public struct MQTTLibraryError: Error, CustomStringConvertible, Equatable {
    public let description: String
}

/// libmosquitto's functions, looked up in the library when the first MQTT client is made.
///
/// ancsd does not link libmosquitto: the library brings libssl and libcrypto, whose relocated
/// data alone is about 0.46 MB resident in each process that loads them (docs/performance.md).
/// A daemon with no MQTT output loads none of the three. Each function's type comes from
/// `mosquitto.h` (the `ancsd_mosquitto_*_fn` types of CMosquitto's shim), so a lookup under a
/// wrong type does not compile.
struct Libmosquitto: Sendable {
    /// The library's name as Debian's `libmosquitto1` installs it.
    static let soname = "libmosquitto.so.1"

    /// The library, loaded and initialised once, the first time it is asked for.
    static let shared: Result<Libmosquitto, MQTTLibraryError> = {
        do throws(MQTTLibraryError) {
            let library = try Libmosquitto(loading: soname)
            _ = library.libInit()
            return .success(library)
        } catch {
            return .failure(error)
        }
    }()

    let libInit: ancsd_mosquitto_lib_init_fn
    let new: ancsd_mosquitto_new_fn
    let destroy: ancsd_mosquitto_destroy_fn
    let intOption: ancsd_mosquitto_int_option_fn
    let usernamePasswordSet: ancsd_mosquitto_username_pw_set_fn
    let tlsSet: ancsd_mosquitto_tls_set_fn
    let willSet: ancsd_mosquitto_will_set_fn
    let connectCallbackSet: ancsd_mosquitto_connect_callback_set_fn
    let disconnectCallbackSet: ancsd_mosquitto_disconnect_callback_set_fn
    let publishCallbackSet: ancsd_mosquitto_publish_callback_set_fn
    let messageCallbackSet: ancsd_mosquitto_message_callback_set_fn
    let connectBindAsync: ancsd_mosquitto_connect_bind_async_fn
    let socket: ancsd_mosquitto_socket_fn
    let wantWrite: ancsd_mosquitto_want_write_fn
    let loopRead: ancsd_mosquitto_loop_read_fn
    let loopWrite: ancsd_mosquitto_loop_write_fn
    let loopMisc: ancsd_mosquitto_loop_misc_fn
    let subscribe: ancsd_mosquitto_subscribe_fn
    let publish: ancsd_mosquitto_publish_fn
    let disconnect: ancsd_mosquitto_disconnect_fn
    let errorString: ancsd_mosquitto_strerror_fn
    let connackString: ancsd_mosquitto_connack_string_fn

    /// Loads `name` (never unloaded) and looks up every function; the error names the library
    /// or the first function missing.
    init(loading name: String) throws(MQTTLibraryError) {
        guard let handle = dlopen(name, RTLD_NOW | RTLD_LOCAL) else {
            let reason = dlerror().map { String(cString: $0) } ?? name
            throw MQTTLibraryError(description: "MQTT needs libmosquitto (\(reason)); install the libmosquitto1 package")
        }
        func function<F>(_ suffix: String) throws(MQTTLibraryError) -> F {
            guard let address = dlsym(handle, "mosquitto_" + suffix) else {
                throw MQTTLibraryError(description: "\(name) has no mosquitto_\(suffix): MQTT needs libmosquitto 2.0 or later")
            }
            return unsafeBitCast(address, to: F.self)
        }
        libInit = try function("lib_init")
        new = try function("new")
        destroy = try function("destroy")
        intOption = try function("int_option")
        usernamePasswordSet = try function("username_pw_set")
        tlsSet = try function("tls_set")
        willSet = try function("will_set")
        connectCallbackSet = try function("connect_callback_set")
        disconnectCallbackSet = try function("disconnect_callback_set")
        publishCallbackSet = try function("publish_callback_set")
        messageCallbackSet = try function("message_callback_set")
        connectBindAsync = try function("connect_bind_async")
        socket = try function("socket")
        wantWrite = try function("want_write")
        loopRead = try function("loop_read")
        loopWrite = try function("loop_write")
        loopMisc = try function("loop_misc")
        subscribe = try function("subscribe")
        publish = try function("publish")
        disconnect = try function("disconnect")
        errorString = try function("strerror")
        connackString = try function("connack_string")
    }
}
