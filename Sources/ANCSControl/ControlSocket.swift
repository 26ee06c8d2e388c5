/// What the daemon's control socket and its clients agree on (docs/control.md).
public enum ControlSocket {
    /// Where `ancsd run` listens under systemd, and where the clients look by default.
    public static let defaultPath = "/run/ancsd/control"
}
