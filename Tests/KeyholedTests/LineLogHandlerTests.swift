import Logging
import Testing

@testable import keyholed

@Suite("LineLogHandler")
struct LineLogHandlerTests {
    @Test("plain values stay bare, keys are sorted")
    func plain() {
        let line = LineLogHandler.format(level: .info, event: "keyholed.ready", metadata: ["socket": "/run/k.sock", "pid": "42"])
        #expect(line == "info keyholed.ready pid=42 socket=/run/k.sock\n")
    }

    @Test("no value can end the line, fake another event, or hide text", arguments: [
        "a\nerror keyholed.forged x=1", "a\r\nb", "tab\there", "quote\"and\\\\backslash", "c1\u{85}next-line",
        "csi\u{9B}31m", "ls\u{2028}ps\u{2029}", "bidi\u{202E}txt.exe", "nul\u{0}", "del\u{7F}", "",
    ])
    func hostileValues(value: String) {
        let line = LineLogHandler.format(level: .notice, event: "connection.bad_frame", metadata: ["v": "\(value)"])
        #expect(line.hasSuffix("\n"))
        let body = line.dropLast()
        #expect(!body.unicodeScalars.contains { $0.value < 0x20 || (0x7F...0x9F).contains($0.value) || [0x2028, 0x2029, 0x202E].contains($0.value) })
        #expect(body.hasPrefix("notice connection.bad_frame v=\""))
        #expect(body.hasSuffix("\""))
    }

    @Test("event names and keys cannot smuggle spaces or '='")
    func names() {
        let line = LineLogHandler.format(level: .info, event: "evil event", metadata: ["k=v x": "1"])
        #expect(line == "info evil_event k_v_x=1\n")
    }
}
