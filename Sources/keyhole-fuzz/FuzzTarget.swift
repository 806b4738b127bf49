#if KEYHOLE_FUZZ
/// The decoders fuzzed, by the name KEYHOLE_FUZZ_TARGET gives (and Tests/Fuzz/<name>/ holds seeds for).
///
/// A target may reject its input however it likes; what it must not do is crash, hang or allocate
/// without bound. Where a decoder has an encoder, the target also checks that what was accepted
/// re-encodes to something the decoder accepts again, and a `fuzzCheck` failure is a crash.
enum FuzzTarget: String, CaseIterable {
    /// FrameDecoder fed the input in chunks, checked against a one-pass model of the framing, each
    /// frame then parsed as a request as the server does.
    case frame
    /// Request.parse and JSONValue.parse of one frame body.
    case request
    /// CompactJWS.parse, signature verification against a fixed key set, and the claim checks.
    case jws
    /// JWKSet(json:), a key set as fetched from an issuer.
    case jwk
    /// WAL recovery of one segment (WALScanner, WALRecovery, StoreRecord decoding and replay).
    case walRecord = "wal-record"
    /// SnapshotReader.load of one snapshot file (header, entries, tables).
    case snapshot

    /// The target this process runs; set once by main before libFuzzer starts (single-threaded).
    nonisolated(unsafe) static var selected = FuzzTarget.frame

    /// Runs the target on one input.
    func run(_ bytes: [UInt8]) {
        switch self {
        case .frame: ProtocolTargets.frame(bytes)
        case .request: ProtocolTargets.request(bytes)
        case .jws: JOSETargets.jws(bytes)
        case .jwk: JOSETargets.jwk(bytes)
        case .walRecord: StoreTargets.walRecord(bytes)
        case .snapshot: StoreTargets.snapshot(bytes)
        }
    }
}

/// A property the decoders must keep; failing it is a finding, reported as a crash so that libFuzzer
/// saves the input (a plain `precondition` would say less, and vanish in -Ounchecked).
func fuzzCheck(_ condition: Bool, _ message: @autoclosure () -> String, file: StaticString = #fileID, line: UInt = #line) {
    if !condition { fatalError("fuzz check failed: \(message())", file: file, line: line) }
}

/// Control bytes taken off the front of an input, so that one input also chooses how it is fed
/// (chunk sizes, limits, modes); a short input gives zeros rather than being thrown away.
struct ControlBytes {
    private var bytes: ArraySlice<UInt8>

    init(_ bytes: [UInt8]) { self.bytes = bytes[...] }

    /// The next control byte, or 0 when none is left.
    mutating func byte() -> UInt8 { bytes.popFirst() ?? 0 }

    /// The next two control bytes as a big-endian number.
    mutating func uint16() -> Int { Int(byte()) << 8 | Int(byte()) }

    /// What is left: the data proper.
    var rest: [UInt8] { Array(bytes) }
}
#endif
