import Logging
import Testing

@testable import KeyholeSystemd

/// What keyholed hands systemd: notification lines and journal fields that cannot be forged or rejected.
@Suite("systemd formats")
struct SystemdFormatTests {
    @Test("a status is one line of at most 200 characters: a newline cannot add an assignment")
    func statusLine() {
        #expect(SystemdNotifier.line("serving: 3 sessions") == "serving: 3 sessions")
        #expect(SystemdNotifier.line("bad\nREADY=1\r\u{7F}") == "bad READY=1  ")
        #expect(SystemdNotifier.line(String(repeating: "é", count: 300)).count == 200)
    }

    @Test("journal field names: KEYHOLE_ and the key in capitals, digits and underscores, at most 64 bytes", arguments: [
        ("op", "KEYHOLE_OP"), ("code", "KEYHOLE_CODE"), ("records_replayed", "KEYHOLE_RECORDS_REPLAYED"),
        ("bad key=x\n", "KEYHOLE_BAD_KEY_X_"), ("émoji", "KEYHOLE__MOJI"),
        (String(repeating: "k", count: 100), "KEYHOLE_" + String(repeating: "K", count: 56)),
    ])
    func fieldNames(_ key: String, _ expected: String) {
        #expect(JournalLogHandler.fieldName(key) == expected)
    }

    @Test("log levels map to syslog priorities as journalctl -p reads them")
    func priorities() {
        #expect([Logger.Level.trace, .debug, .info, .notice, .warning, .error, .critical].map(JournalLogHandler.priority) == [7, 7, 6, 5, 4, 3, 2])
    }
}
