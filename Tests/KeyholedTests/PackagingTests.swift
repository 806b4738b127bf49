import Foundation
import KeyholeTestSupport
import Testing

@testable import keyholed

/// The systemd units under packaging/, checked by systemd's own tools.
@Suite("systemd units", .ownThreads)
struct PackagingTests {
    static let packaging = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("packaging/systemd")

    /// The units in a directory of their own, ExecStart pointing at the keyholed under test
    /// (verify checks that the binary exists; /usr/bin/keyholed is there only once installed).
    static func units() throws -> URL {
        let directory = try DaemonProcess.makeDirectory()
        for name in ["keyholed.socket", "keyholed-http.socket", "keyholed.service"] {
            var text = try String(contentsOf: packaging.appendingPathComponent(name), encoding: .utf8)
            text = text.replacingOccurrences(of: "ExecStart=/usr/bin/keyholed", with: "ExecStart=\(DaemonProcess.binary.path)")
            text = text.replacingOccurrences(of: "ExecReload=/usr/bin/keyhole", with: "ExecReload=\(ChildProcess.builtProduct("keyhole").path)")
            try text.write(to: directory.appendingPathComponent(name), atomically: true, encoding: .utf8)
        }
        return directory
    }

    @Test("systemd-analyze verify finds nothing at all to say about the sockets and the service")
    func verify() throws {
        let directory = try Self.units()
        defer { try? FileManager.default.removeItem(at: directory) }
        // Documentation=man:... is looked up with man(1): the pages under packaging/man. Service= of
        // keyholed-http.socket must name a unit verify loads.
        let run = try ChildProcess.run([
            "/usr/bin/systemd-analyze", "verify",
            directory.appendingPathComponent("keyholed.socket").path, directory.appendingPathComponent("keyholed-http.socket").path,
            directory.appendingPathComponent("keyholed.service").path,
        ], environment: ["MANPATH": Self.packaging.deletingLastPathComponent().appendingPathComponent("man").path])
        #expect(run.status == 0)
        #expect(run.stdout.isEmpty && run.stderr.isEmpty, "\(run.stdout)\(run.stderr)")
    }

    /// A unit's settings, `Key=value` lines outside comments; a key given twice keeps both values.
    static func settings(_ name: String) throws -> [String: [String]] {
        let text = try String(contentsOf: packaging.appendingPathComponent(name), encoding: .utf8)
        var settings: [String: [String]] = [:]
        for line in text.split(separator: "\n") where !line.hasPrefix("#") && !line.hasPrefix("[") {
            guard let equals = line.firstIndex(of: "=") else { continue }
            settings[String(line[..<equals]), default: []].append(String(line[line.index(after: equals)...]))
        }
        return settings
    }

    @Test("keyholed-http.socket: the socket keyholed takes as http, at [http]'s default path, for keyholed.service, in a group keyhole.sysusers creates, listening as keyholed.socket does, and wanted by nothing the package enables")
    func httpSocket() throws {
        let http = try Self.settings("keyholed-http.socket")
        let main = try Self.settings("keyholed.socket")
        let service = try Self.settings("keyholed.service")
        // The name Keyholed.run passes to ListenSockets.take(named: "keyhole", others: ["http"]).
        #expect(http["FileDescriptorName"] == ["http"])
        #expect(main["FileDescriptorName"] == ["keyhole"])
        // Where keyholed itself would bind it: a proxy configured for either finds it.
        let defaults = try #require(try DaemonConfiguration.parse("[http]\n").http)
        #expect(http["ListenStream"].map { "unix:\($0[0])" } == defaults.socket.description)
        #expect(http["Service"] == ["keyholed.service"])
        #expect(http["Accept"] == ["no"])
        for key in ["SocketUser", "SocketMode", "DirectoryMode", "RemoveOnStop", "Backlog"] {
            #expect(http[key] != nil && http[key] == main[key], "\(key): \(http[key] ?? []) against keyholed.socket's \(main[key] ?? [])")
        }
        // Its own group: keyhole-clients (the main socket's) may not ask /authz, keyhole-proxies may
        // not call the main socket.
        let group = try #require(http["SocketGroup"]?.first)
        #expect(group == "keyhole-proxies" && group != main["SocketGroup"]?.first)
        let sysusers = try String(contentsOf: Self.packaging.appendingPathComponent("keyhole.sysusers"), encoding: .utf8)
        let groups = sysusers.split(separator: "\n").filter { $0.hasPrefix("g ") }.map { $0.split(separator: " ")[1] }
        #expect(groups.contains(Substring(group)) && groups.contains("keyhole-clients"), "\(groups)")
        // Off unless configured: keyholed.service neither needs it nor enables it.
        for key in ["Requires", "Wants", "BindsTo", "Also", "Upholds"] {
            #expect(!(service[key] ?? []).joined(separator: " ").contains("keyholed-http"), "\(key)")
        }
        // Enabled, it starts with the other sockets, before any service.
        #expect(http["WantedBy"] == ["sockets.target"])
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
