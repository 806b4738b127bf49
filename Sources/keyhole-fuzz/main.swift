// keyhole-fuzz: libFuzzer targets for keyholed's decoders (`make fuzz`; Tests/Fuzz/README.md).
//
// SwiftPM links an executable with `--defsym main=<module>_main`, so libFuzzer's own `main` never
// runs (swiftlang/swift#75800) and `-parse-as-library` fails to link. This top-level code is the
// program's main instead, and hands over to libFuzzer through LLVMFuzzerRunDriver, its entry point
// for programs with a main of their own. Everything that needs libFuzzer, or `@testable import`
// (debug builds only), is behind KEYHOLE_FUZZ, so that `swift build -c release` still builds this.

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Writes to standard error (Glibc's `stderr` is a global that Swift 6 will not share).
func printError(_ message: String) {
    var message = message
    message.withUTF8 { _ = write(STDERR_FILENO, $0.baseAddress, $0.count) }
}

#if KEYHOLE_FUZZ
@_extern(c, "LLVMFuzzerRunDriver")
func LLVMFuzzerRunDriver(
    _ argc: UnsafeMutablePointer<CInt>,
    _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>>,
    _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt
) -> CInt

/// libFuzzer's per-input callback. FuzzerMain.o, which libFuzzer links whole, refers to it by this
/// name even though its `main` is not the one that runs.
@_cdecl("LLVMFuzzerTestOneInput")
func fuzzTestOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = size == 0 ? [] : Array(UnsafeBufferPointer(start: data, count: size))
    FuzzTarget.selected.run(bytes)
    return 0
}

// Choose the target before libFuzzer starts, so that a bad name fails at once and not at the first input.
guard let name = getenv("KEYHOLE_FUZZ_TARGET").map({ String(cString: $0) }), let target = FuzzTarget(rawValue: name) else {
    let names = FuzzTarget.allCases.map(\.rawValue).joined(separator: "|")
    printError("keyhole-fuzz: set KEYHOLE_FUZZ_TARGET to one of \(names)\n")
    exit(64)
}
FuzzTarget.selected = target
var argc = CommandLine.argc
var argv = CommandLine.unsafeArgv
exit(LLVMFuzzerRunDriver(&argc, &argv, fuzzTestOneInput))
#else
printError(
    """
    keyhole-fuzz: this build has no fuzzing in it. Build and run it with `make fuzz`, or:
      swift build --scratch-path .build-fuzz --product keyhole-fuzz -Xswiftc -sanitize=fuzzer,address \\
        -Xswiftc -DKEYHOLE_FUZZ -Xswiftc -enable-experimental-feature -Xswiftc Extern
      KEYHOLE_FUZZ_TARGET=frame .build-fuzz/debug/keyhole-fuzz Tests/Fuzz/frame

    """)
exit(64)
#endif
