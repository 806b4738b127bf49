import Foundation
import KeyholeTestSupport
import Testing

/// packaging/deb/build-deb.sh (what `make deb` runs) on the binaries under test, and the package's
/// life (install, upgrade, remove, purge) in a throwaway root: this machine's root under an overlay
/// whose changes vanish with the test's mount namespace.
@Suite("Debian package", .serialized)
struct DebianPackageTests {
    static let top = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// A package of the debug binaries (whose Swift runtime no Debian package provides, hence the flag).
    static func build(version: String, into directory: URL) async throws -> String {
        let out = directory.appendingPathComponent("keyhole_\(version).deb").path
        let run = try await ChildProcess.runOffPool([
            top.appendingPathComponent("packaging/deb/build-deb.sh").path, "--bin", DaemonProcess.binary.deletingLastPathComponent().path,
            "--out", out, "--version", version, "--allow-unpackaged-libs", "--fast", "--strip",
        ])
        guard run.status == 0 else { throw RawConnection.Failure(description: "build-deb.sh: \(run.stderr)") }
        return out
    }

    @Test("the package holds the binaries, units, sysusers and tmpfiles entries, the config as a conffile, the man pages and the maintainer scripts")
    func contents() async throws {
        let directory = try DaemonProcess.makeDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let deb = try await Self.build(version: "0.1.0-1", into: directory)

        let info = try await ChildProcess.runOffPool(["/usr/bin/dpkg-deb", "-I", deb])
        #expect(info.status == 0)
        for line in ["Package: keyhole", "Version: 0.1.0-1", "Architecture: ", "conffiles", "postinst", "prerm", "postrm"] {
            #expect(info.stdout.contains(line), "\(line) in\n\(info.stdout)")
        }
        let depends = try #require(info.stdout.split(separator: "\n").first { $0.contains("Depends:") })
        for package in ["libssl3", "libsystemd0", "libc6", "systemd", "init-system-helpers"] {
            #expect(depends.contains(package), "\(depends)")
        }
        let conffiles = try await ChildProcess.runOffPool(["/usr/bin/dpkg-deb", "-f", deb, "Package"])
        #expect(conffiles.stdout == "keyhole\n")
        let control = try await ChildProcess.runOffPool(["/bin/sh", "-c", "dpkg-deb --ctrl-tarfile \"$0\" | tar -xOf - ./conffiles", deb])
        #expect(control.stdout == "/etc/keyhole/keyholed.toml\n")

        let listing = try await ChildProcess.runOffPool(["/usr/bin/dpkg-deb", "-c", deb])
        #expect(listing.status == 0)
        for (path, mode) in [
            ("./usr/bin/keyholed", "-rwxr-xr-x"), ("./usr/bin/keyhole", "-rwxr-xr-x"),
            ("./usr/lib/systemd/system/keyholed.service", "-rw-r--r--"), ("./usr/lib/systemd/system/keyholed.socket", "-rw-r--r--"),
            ("./usr/lib/sysusers.d/keyhole.conf", "-rw-r--r--"), ("./usr/lib/tmpfiles.d/keyhole.conf", "-rw-r--r--"),
            ("./etc/keyhole/keyholed.toml", "-rw-r--r--"), ("./usr/share/man/man8/keyholed.8.gz", "-rw-r--r--"),
            ("./usr/share/man/man1/keyhole.1.gz", "-rw-r--r--"), ("./usr/share/man/man5/keyholed.toml.5.gz", "-rw-r--r--"),
            ("./usr/share/doc/keyhole/copyright", "-rw-r--r--"), ("./etc/keyhole/credentials/", "drwx------"),
        ] {
            let line = listing.stdout.split(separator: "\n").first { $0.hasSuffix(" " + path) }
            #expect(line?.hasPrefix(mode + " root/root") == true, "\(path): \(line ?? "missing")")
        }
        // Nothing of the state directory or the socket: those are made on the host, by sysusers,
        // tmpfiles and systemd.
        #expect(!listing.stdout.contains("./var/") && !listing.stdout.contains("./run/"))
    }

    /// Runs in the throwaway root: prints a `name=value` line per finding for the test to check.
    static let lifecycle = #"""
        set -u
        old=$1 new=$2
        say() { printf '%s=%s\n' "$1" "$2"; }
        exists() { if [ -e "$1" ] || [ -L "$1" ]; then echo yes; else echo no; fi; }
        start() {
            rm -f /tmp/keyholed.log
            setpriv --reuid=keyhole --regid=keyhole --init-groups /usr/bin/keyholed --config /etc/keyhole/keyholed.toml \
                --socket /var/lib/keyhole/test.sock 2>/tmp/keyholed.log &
            pid=$!
            # Until keyholed says it is ready (or gave up): a condition, at most 60 s.
            i=0
            until grep -q keyholed.ready /tmp/keyholed.log || ! kill -0 $pid 2>/dev/null || [ $i -ge 600 ]; do sleep 0.1; i=$((i+1)); done
        }
        stop() { kill -TERM $pid; wait $pid; say stopped_status $?; }
        k() { /usr/bin/keyhole "$@" --socket /var/lib/keyhole/test.sock; }

        say root "$(stat -c '%a %U' /)"
        dpkg -i "$old" >/tmp/dpkg.log 2>&1; say install_status $?
        say binary "$(exists /usr/bin/keyholed)"
        say user "$(getent passwd keyhole | cut -d: -f1,6,7)"
        say group "$(getent group keyhole-clients | cut -d: -f1)"
        say state_dir "$(stat -c '%a %U' /var/lib/keyhole)"
        say socket_enabled "$(exists /etc/systemd/system/sockets.target.wants/keyholed.socket)"
        say config "$(exists /etc/keyhole/keyholed.toml)"
        say credentials_dir "$(stat -c '%a %U' /etc/keyhole/credentials)"
        start
        say ready "$(grep -c keyholed.ready /tmp/keyholed.log)"
        token=$(k call session.create '{"sub":"u1"}' | sed -n 's/.*"session":"\([^"]*\)".*/\1/p')
        say token_made "$([ -n "$token" ] && echo yes || echo no)"
        stop

        echo '# edited by the admin' >> /etc/keyhole/keyholed.toml
        dpkg -i "$new" >>/tmp/dpkg.log 2>&1; say upgrade_status $?
        say version "$(dpkg-query -W -f='${Version}' keyhole)"
        say config_kept "$(grep -c '# edited by the admin' /etc/keyhole/keyholed.toml)"
        start
        say session_after_upgrade "$(k call session.get "{\"session\":\"$token\"}" >/dev/null 2>&1 && echo yes || echo no)"
        stop

        dpkg -r keyhole >>/tmp/dpkg.log 2>&1; say remove_status $?
        say binary_after_remove "$(exists /usr/bin/keyholed)"
        say state_after_remove "$(exists /var/lib/keyhole/wal)"
        say config_after_remove "$(exists /etc/keyhole/keyholed.toml)"

        dpkg -P keyhole >>/tmp/dpkg.log 2>&1; say purge_status $?
        say state_after_purge "$(exists /var/lib/keyhole)"
        say config_after_purge "$(exists /etc/keyhole)"
        say socket_enabled_after_purge "$(exists /etc/systemd/system/sockets.target.wants/keyholed.socket)"
        say dpkg_status "$(dpkg-query -W -f='${Status}' keyhole 2>&1 | head -c 40)"
        echo "--- dpkg"; cat /tmp/dpkg.log
        """#

    @Test("install makes the user, the state directory and enables the socket; upgrade keeps state and an edited config; remove keeps both; purge deletes them")
    func lifecycleInThrowawayRoot() async throws {
        let directory = try DaemonProcess.makeDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let old = try await Self.build(version: "0.1.0-1", into: directory)
        let new = try await Self.build(version: "0.1.0-2", into: directory)
        let layers = directory.appendingPathComponent("overlay").path
        try FileManager.default.createDirectory(atPath: layers, withIntermediateDirectories: false)
        let script = directory.appendingPathComponent("lifecycle.sh")
        try Self.lifecycle.write(to: script, atomically: true, encoding: .utf8)
        // This machine's root, copy-on-write into a tmpfs that goes with the mount namespace.
        // umask 022 first: the shell inherits this test process's umask at the moment it is spawned,
        // and that is not always 022. KeyholeServer's SocketFile.bind sets the process-wide umask to
        // 0177 across an await while it binds a 0600 socket, and in a full `swift test` the
        // KeyholeClientTests run servers in this very process; a shell spawned then made `upper` 0600,
        // the overlay's root takes the upper directory's mode, and every non-root user in the
        // chroot (keyholed as keyhole, mandb as man) failed to load libc.so.6 with EACCES, exit 127,
        // while every step run as root passed. The chroot's dpkg and maintainer scripts get 022 too,
        // as they would from an administrator's shell.
        let setup = """
            set -e
            umask 022
            mount -t tmpfs none \(layers)
            mkdir \(layers)/upper \(layers)/work \(layers)/root
            mount -t overlay overlay -o lowerdir=/,upperdir=\(layers)/upper,workdir=\(layers)/work \(layers)/root
            mount --bind /proc \(layers)/root/proc
            mount --bind /dev \(layers)/root/dev
            mount -t tmpfs none \(layers)/root/run
            exec chroot \(layers)/root /bin/sh \(script.path) \(old) \(new)
            """
        let run = try await ChildProcess.runOffPool(["/usr/bin/unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", setup])
        #expect(run.status == 0, "\(run.stderr)")
        var found: [String: String] = [:]
        for line in run.stdout.split(separator: "\n") {
            guard let equals = line.firstIndex(of: "=") else { continue }
            found[String(line[..<equals])] = String(line[line.index(after: equals)...])
        }
        let expected: [String: String] = [
            "root": "755 root", "install_status": "0", "binary": "yes", "user": "keyhole:/var/lib/keyhole:/usr/sbin/nologin", "group": "keyhole-clients",
            "state_dir": "700 keyhole", "socket_enabled": "yes", "config": "yes", "credentials_dir": "700 root", "ready": "1", "token_made": "yes",
            "stopped_status": "0", "upgrade_status": "0", "version": "0.1.0-2", "config_kept": "1", "session_after_upgrade": "yes",
            "remove_status": "0", "binary_after_remove": "no", "state_after_remove": "yes", "config_after_remove": "yes",
            "purge_status": "0", "state_after_purge": "no", "config_after_purge": "no", "socket_enabled_after_purge": "no",
        ]
        for (key, value) in expected.sorted(by: { $0.key < $1.key }) {
            #expect(found[key] == value, "\(key): \(found[key] ?? "missing")\n\(run.stdout)\(run.stderr)")
        }
        #expect(found["dpkg_status"]?.contains("not-installed") == true || found["dpkg_status"]?.contains("no packages found") == true,
            "\(found["dpkg_status"] ?? "missing")")
        // Nothing leaked out of the throwaway root.
        #expect(!FileManager.default.fileExists(atPath: "/usr/bin/keyholed"))
    }
}

