/// The version of ancsd: `ancsd --version`, `status`, capture metadata and the Debian package
/// (`make deb` reads it from this line, so it is the only place the version is written).
public let ancsdVersion = "0.1.0"
