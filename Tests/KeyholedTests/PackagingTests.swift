import Foundation
import KeyholeTestSupport
import Testing

/// The systemd units under packaging/, checked by systemd's own tools.
@Suite("systemd units")
struct PackagingTests {
    static let packaging = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("packaging/systemd")

    /// The units in a directory of their own, ExecStart pointing at the keyholed under test
    /// (verify checks that the binary exists; /usr/bin/keyholed is there only once installed).
    static func units() throws -> URL {
        let directory = try DaemonProcess.makeDirectory()
        for name in ["keyholed.socket", "keyholed.service"] {
            var text = try String(contentsOf: packaging.appendingPathComponent(name), encoding: .utf8)
            text = text.replacingOccurrences(of: "ExecStart=/usr/bin/keyholed", with: "ExecStart=\(DaemonProcess.binary.path)")
            text = text.replacingOccurrences(of: "ExecReload=/usr/bin/keyhole", with: "ExecReload=\(ChildProcess.builtProduct("keyhole").path)")
            try text.write(to: directory.appendingPathComponent(name), atomically: true, encoding: .utf8)
        }
        return directory
    }

    @Test("systemd-analyze verify finds nothing at all to say about the socket and the service")
    func verify() throws {
        let directory = try Self.units()
        defer { try? FileManager.default.removeItem(at: directory) }
        // Documentation=man:... is looked up with man(1): the pages under packaging/man.
        let run = try ChildProcess.run([
            "/usr/bin/systemd-analyze", "verify",
            directory.appendingPathComponent("keyholed.socket").path, directory.appendingPathComponent("keyholed.service").path,
        ], environment: ["MANPATH": Self.packaging.deletingLastPathComponent().appendingPathComponent("man").path])
        #expect(run.status == 0)
        #expect(run.stdout.isEmpty && run.stderr.isEmpty, "\(run.stdout)\(run.stderr)")
    }

    @Test("the man pages keyholed(8), keyhole(1) and keyholed.toml(5) render without a single groff warning", arguments: [
        "man8/keyholed.8", "man1/keyhole.1", "man5/keyholed.toml.5",
    ])
    func manPage(page: String) throws {
        let path = Self.packaging.deletingLastPathComponent().appendingPathComponent("man/\(page)").path
        let lint = try ChildProcess.run(["/usr/bin/groff", "-man", "-Tutf8", "-ww", "-z", path])
        #expect(lint.status == 0)
        #expect(lint.stdout.isEmpty && lint.stderr.isEmpty, "\(lint.stdout)\(lint.stderr)")
        let rendered = try ChildProcess.run(["/usr/bin/man", "-l", path], environment: ["MANWIDTH": "80", "MAN_KEEP_FORMATTING": ""])
        #expect(rendered.status == 0)
        for section in ["NAME", "SYNOPSIS", "DESCRIPTION", "SEE ALSO"] where !page.hasSuffix(".5") || section != "SYNOPSIS" {
            #expect(rendered.stdout.contains(section), "\(page): \(section)")
        }
    }

    @Test("systemd-analyze security rates the service's exposure 2.0 or lower")
    func security() throws {
        let directory = try Self.units()
        defer { try? FileManager.default.removeItem(at: directory) }
        let run = try ChildProcess.run([
            "/usr/bin/systemd-analyze", "security", "--offline=yes", "--no-pager", directory.appendingPathComponent("keyholed.service").path,
        ])
        let marker = "Overall exposure level for keyholed.service: "
        let line = try #require(run.stdout.split(separator: "\n").first { $0.contains(marker) }, "\(run.stdout)\(run.stderr)")
        let exposure = try #require(Double(line.split(separator: ":").last!.split(separator: " ").first!))
        print("systemd-analyze security: keyholed.service exposure \(exposure)")
        #expect(exposure <= 2.0)
        #expect(exposure > 0)
    }
}
