/// A value that only its loop's thread touches, carried through a `@Sendable` closure to be used back
/// on that thread: the loops check where they run it (`NIOLoopBound`, `SocketLoop.inLoop`), the type
/// system cannot.
struct LoopConfined<Value>: @unchecked Sendable {
    let value: Value
}
