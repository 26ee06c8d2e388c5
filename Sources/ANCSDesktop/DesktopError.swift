/// A failure of `ancsd desktop`, as text.
public struct DesktopError: Error, CustomStringConvertible, Sendable {
    public var description: String
    public init(_ description: String) { self.description = description }
}
