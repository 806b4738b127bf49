import Foundation
import KeyholeTestSupport
import Testing

/// packaging/deb/build-deb.sh (what `make deb` runs) on the binaries under test, and the package's
/// life (install, upgrade, remove, purge) under a real systemd: Scripts/systemd-container.sh boots one
/// as PID 1 of a throwaway container over this machine's root, whose changes vanish with it.
@Suite("Debian package", .serialized, .packagedServiceOnFirstPass, .ownThreads)
struct DebianPackageTests {
    static let top = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// A package of the debug binaries (whose Swift runtime no Debian package provides, hence the flag),
    /// copied into `directory`. Built once per version for the whole test process (`BuiltPackages`):
    /// a build is about 27 s of CPU, and seven tests want one while the rest of the suite runs.
    static func build(version: String, into directory: URL) async throws -> String {
        let out = directory.appendingPathComponent("keyhole_\(version).deb")
        try FileManager.default.copyItem(at: try await BuiltPackages.shared.package(version: version), to: out)
        return out.path
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
            ("./usr/lib/systemd/system/keyholed-http.socket", "-rw-r--r--"),
            ("./usr/lib/sysusers.d/keyhole.conf", "-rw-r--r--"), ("./usr/lib/tmpfiles.d/keyhole.conf", "-rw-r--r--"),
            ("./etc/keyhole/keyholed.toml", "-rw-r--r--"), ("./usr/share/man/man8/keyholed.8.gz", "-rw-r--r--"),
            ("./usr/share/man/man1/keyhole.1.gz", "-rw-r--r--"), ("./usr/share/man/man5/keyholed.toml.5.gz", "-rw-r--r--"),
            ("./usr/share/doc/keyhole/copyright", "-rw-r--r--"), ("./etc/keyhole/credentials/", "drwx------"),
            ("./usr/share/doc/keyhole/examples/", "drwxr-xr-x"), ("./usr/share/doc/keyhole/examples/keyholed-postgres.conf", "-rw-r--r--"),
            ("./usr/share/doc/keyhole/changelog.Debian.gz", "-rw-r--r--"), ("./usr/share/lintian/overrides/keyhole", "-rw-r--r--"),
        ] {
            let line = listing.stdout.split(separator: "\n").first { $0.hasSuffix(" " + path) }
            #expect(line?.hasPrefix(mode + " root/root") == true, "\(path): \(line ?? "missing")")
        }
        // Nothing of the state directory or the socket: those are made on the host, by sysusers,
        // tmpfiles and systemd.
        #expect(!listing.stdout.contains("./var/") && !listing.stdout.contains("./run/"))

        // Debian's own checks: no error and no warning but what only a debug build has (its binaries
        // find the toolchain's Swift runtime through RUNPATH; `make deb`'s are linked with it and
        // have none, and make deb fails on any finding). The overrides are each explained.
        let lint = try await ChildProcess.runOffPool(["/usr/bin/lintian", "--tag-display-limit", "0", deb])
        let findings = (lint.stdout + lint.stderr).split(separator: "\n").filter { $0.hasPrefix("E: ") || $0.hasPrefix("W: ") }
        #expect(findings.allSatisfy { $0.contains("custom-library-search-path RUNPATH") }, "\(findings)")
        // 0: nothing found; 2: errors found (the debug build's RUNPATH); anything else: lintian failed.
        #expect([0, 2].contains(lint.status), "lintian: exit \(lint.status): \(lint.stderr)")
        #expect(depends.contains("init-system-helpers (>= 1.54~)"), "\(depends)")
    }

    @Test("keyhole links Foundation's essentials only, not its internationalisation (ICU's data, most of a static binary): a lighter CLI")
    func cliFoundation() async throws {
        let dynamic = try await ChildProcess.runOffPool(["/usr/bin/readelf", "-d", ChildProcess.builtProduct("keyhole").path])
        #expect(dynamic.status == 0)
        let needed = dynamic.stdout.split(separator: "\n").filter { $0.contains("(NEEDED)") }
        #expect(needed.contains { $0.contains("[libFoundationEssentials.so]") }, "\(needed)")
        #expect(!needed.contains { $0.contains("[libFoundation.so]") || $0.contains("[libFoundationInternationalization.so]") }, "\(needed)")
    }

    @Test("build-deb.sh takes a maintainer of the form NAME <ADDRESS> and refuses others; the placeholder's lintian tags are overridden only without one")
    func maintainer() async throws {
        let directory = try DaemonProcess.makeDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let script = Self.top.appendingPathComponent("packaging/deb/build-deb.sh").path
        let bin = DaemonProcess.binary.deletingLastPathComponent().path
        let out = directory.appendingPathComponent("site.deb").path
        let built = try await ChildProcess.runOffPool([
            script, "--bin", bin, "--out", out, "--version", "0.1.0-1", "--allow-unpackaged-libs", "--fast", "--maintainer", "Site Admin <admin@example.org>",
        ])
        #expect(built.status == 0, "\(built.stderr)")
        #expect(try await ChildProcess.runOffPool(["/usr/bin/dpkg-deb", "-f", out, "Maintainer"]).stdout == "Site Admin <admin@example.org>\n")
        let overrides = try await ChildProcess.runOffPool(["/bin/sh", "-c", "dpkg-deb --fsys-tarfile \"$0\" | tar -xOf - ./usr/share/lintian/overrides/keyhole", out])
        #expect(overrides.stdout.contains("non-standard-dir-perm") && !overrides.stdout.contains("bogus-mail-host"), "\(overrides.stdout)")
        for bad in ["admin@example.org", "A | B <a@b.c>", "A & B <a@b.c>"] {
            let refused = try await ChildProcess.runOffPool([
                script, "--bin", bin, "--out", out, "--version", "0.1.0-1", "--allow-unpackaged-libs", "--fast", "--maintainer", bad,
            ])
            #expect(refused.status == 64, "\(bad): \(refused.stderr)")
        }
    }

    /// Runs `script` with `arguments` as root under systemd in a throwaway container, which sees
    /// `directory` as /srv/keyhole-test (Scripts/systemd-container.sh); expects it to succeed. Returns
    /// the run and the `name=value` lines it printed, one finding each.
    static func runInContainer(
        _ script: String, in directory: URL, arguments: [String]
    ) async throws -> (run: ChildProcess.Result, found: [String: String]) {
        try script.write(to: directory.appendingPathComponent("script.sh"), atomically: true, encoding: .utf8)
        let run = try await ChildProcess.runOffPool([
            top.appendingPathComponent("Scripts/systemd-container.sh").path, directory.path, "/bin/sh", "/srv/keyhole-test/script.sh",
        ] + arguments)
        #expect(run.status == 0, "\(run.stderr)")
        var found: [String: String] = [:]
        for line in run.stdout.split(separator: "\n") {
            guard let equals = line.firstIndex(of: "=") else { continue }
            found[String(line[..<equals])] = String(line[line.index(after: equals)...])
        }
        return (run, found)
    }

    /// Runs in the container under systemd: prints a `name=value` line per finding for the test to check.
    static let lifecycle = #"""
        set -u
        old=$1 new=$2
        say() { printf '%s=%s\n' "$1" "$2"; }
        exists() { if [ -e "$1" ] || [ -L "$1" ]; then echo yes; else echo no; fi; }
        prop() { systemctl show -P "$2" "$1"; }
        k() { /usr/bin/keyhole "$@"; }

        say root "$(stat -c '%a %U' /)"
        say pid1 "$(cat /proc/1/comm)"
        dpkg -i "$old" >/tmp/dpkg.log 2>&1; say install_status $?
        say binary "$(exists /usr/bin/keyholed)"
        say user "$(getent passwd keyhole | cut -d: -f1,6,7)"
        say group "$(getent group keyhole-clients | cut -d: -f1)"
        say proxies_group "$(getent group keyhole-proxies | cut -d: -f1)"
        say state_dir "$(stat -c '%a %U' /var/lib/keyhole)"
        say credentials_dir "$(stat -c '%a %U' /etc/keyhole/credentials)"
        say config "$(exists /etc/keyhole/keyholed.toml)"
        say socket_enabled "$(systemctl is-enabled keyholed.socket)"
        say socket_active "$(systemctl is-active keyholed.socket)"
        say socket_file "$(stat -c '%a %U %G' /run/keyhole/keyhole.sock 2>&1)"
        # Installed, not enabled: keyholed serves HTTP only with [http], which the admin adds.
        say http_socket_enabled "$(systemctl is-enabled keyholed-http.socket)"
        say http_socket_active "$(systemctl is-active keyholed-http.socket)"
        say http_socket_file "$(exists /run/keyhole/http.sock)"
        # A file in /etc/keyhole/credentials reaches keyholed as credential keyhole_<name> (LoadCredential=).
        echo probe-secret >/etc/keyhole/credentials/probe
        # Socket activation: nothing runs until the first client connects, which it then answers.
        say service_before_connection "$(systemctl is-active keyholed.service)"
        say first_ping "$(k call ping '{}' >/dev/null 2>&1 && echo answered || echo failed)"
        # keyholed may answer before systemd has taken its READY=1 (the service is "activating" until
        # then): polled for at most 10 s.
        i=0
        while [ "$(systemctl is-active keyholed.service)" = activating ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
        say service_after_connection "$(systemctl is-active keyholed.service)"
        say service_status "$(prop keyholed.service StatusText | cut -d: -f1)"
        pid=$(prop keyholed.service MainPID)
        say service_user "$(ps -o user= -p "$pid")"
        say sandbox "$(grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/$pid/status | tr -s ' \t' ' ' | tr '\n' ' ')"
        say watchdog "$(prop keyholed.service WatchdogUSec)"
        say credential "$(cat /run/credentials/keyholed.service/keyhole_probe 2>&1)"
        rm /etc/keyhole/credentials/probe
        # The journal gets structured entries (JOURNAL_STREAM): an event field, and info as priority 6.
        say ready_logged "$(journalctl KEYHOLE_EVENT=keyholed.ready _SYSTEMD_UNIT=keyholed.service -o export --no-pager | grep -c '^PRIORITY=6$')"
        token=$(k call session.create '{"sub":"u1"}' | sed -n 's/.*"session":"\([^"]*\)".*/\1/p')
        say token_made "$([ -n "$token" ] && echo yes || echo no)"
        say reload_status "$(systemctl reload keyholed.service >/tmp/reload.log 2>&1; echo $?)"
        say reload_logged "$(journalctl KEYHOLE_EVENT=config.reloaded -o cat --no-pager | wc -l)"

        # A wedged keyholed (stopped: no more WATCHDOG=1) is killed and restarted, and keeps its data.
        # A 2 s watchdog for the test; the abort timeout too, as a stopped process ignores SIGABRT.
        mkdir -p /etc/systemd/system/keyholed.service.d
        printf '[Service]\nWatchdogSec=2s\nTimeoutAbortSec=2s\n' >/etc/systemd/system/keyholed.service.d/test.conf
        systemctl daemon-reload && systemctl restart keyholed.service
        wedged=$(prop keyholed.service MainPID)
        kill -STOP "$wedged"
        # Until systemd has started another (a condition, polled for at most 30 s).
        i=0
        while [ "$(prop keyholed.service MainPID)" = "$wedged" ] || [ "$(systemctl is-active keyholed.service)" != active ]; do
            [ $i -ge 150 ] && break; sleep 0.2; i=$((i+1))
        done
        say watchdog_restarted "$([ "$(prop keyholed.service MainPID)" != "$wedged" ] && echo yes || echo no)"
        say watchdog_logged "$(journalctl -u keyholed.service -o cat --no-pager | grep -c 'Watchdog timeout')"
        say session_after_watchdog "$(k call session.get "{\"session\":\"$token\"}" >/dev/null 2>&1 && echo yes || echo no)"
        rm -r /etc/systemd/system/keyholed.service.d
        systemctl daemon-reload && systemctl restart keyholed.service

        # The admin turns the HTTP listener on as the reference file and keyholed(8) say. (The
        # limiter reset: this test starts keyholed more often than systemd's 5 starts in 10 s.)
        systemctl reset-failed keyholed.service
        sed -i 's/^# \[http\]$/[http]/' /etc/keyhole/keyholed.toml
        systemctl enable keyholed-http.socket 2>/dev/null
        systemctl stop keyholed.service && systemctl start keyholed-http.socket
        # HTTP over a Unix socket: curl (Debian's curl package).
        say curl "$(command -v curl >/dev/null && echo found || echo 'missing: apt-get install curl')"
        health() { curl -s -o /dev/null -w '%{http_code}' --max-time 10 --unix-socket /run/keyhole/http.sock http://keyhole/healthz; }
        say http_health_before_upgrade "$(health)"
        http_since=$(prop keyholed-http.socket ActiveEnterTimestampMonotonic)

        # The upgrade, with a client connecting for each request all along: the listening socket stays
        # with systemd, so none may see an error.
        echo '# edited by the admin' >> /etc/keyhole/keyholed.toml
        pid_before=$(prop keyholed.service MainPID)
        socket_since=$(prop keyholed.socket ActiveEnterTimestampMonotonic)
        ( answered=0 failed=0
          while [ ! -e /tmp/upgraded ]; do
              if k call ping '{}' >/dev/null 2>>/tmp/load.err; then answered=$((answered+1)); else failed=$((failed+1)); fi
          done
          echo "$answered $failed" >/tmp/load.result ) &
        loader=$!
        dpkg -i "$new" >>/tmp/dpkg.log 2>&1; say upgrade_status $?
        touch /tmp/upgraded; wait $loader
        read answered failed </tmp/load.result
        say failed_during_upgrade "$failed"
        say answered_during_upgrade "$([ "$answered" -gt 0 ] && echo yes || echo no)"
        say version "$(dpkg-query -W -f='${Version}' keyhole)"
        say config_kept "$(grep -c '# edited by the admin' /etc/keyhole/keyholed.toml)"
        say service_restarted "$([ "$(prop keyholed.service MainPID)" != "$pid_before" ] && echo yes || echo no)"
        say service_after_upgrade "$(systemctl is-active keyholed.service)"
        say socket_kept "$([ "$(prop keyholed.socket ActiveEnterTimestampMonotonic)" = "$socket_since" ] && echo yes || echo no)"
        say session_after_upgrade "$(k call session.get "{\"session\":\"$token\"}" >/dev/null 2>&1 && echo yes || echo no)"
        # The HTTP socket too stays with systemd, enabled, and is passed to the new keyholed.
        say http_socket_enabled_after_upgrade "$(systemctl is-enabled keyholed-http.socket)"
        say http_socket_kept "$([ "$(prop keyholed-http.socket ActiveEnterTimestampMonotonic)" = "$http_since" ] && echo yes || echo no)"
        say http_health_after_upgrade "$(health)"
        # The journal takes keyholed's entry a moment after it is written: polled for at most 10 s.
        adopted() { journalctl _PID="$(prop keyholed.service MainPID)" KEYHOLE_EVENT=systemd.socket_adopted -o cat --no-pager | grep -c '(http)'; }
        i=0
        until [ "$(adopted)" -ge 1 ] || [ $i -ge 100 ]; do sleep 0.1; i=$((i+1)); done
        say http_adopted_after_upgrade "$(adopted)"

        dpkg -r keyhole >>/tmp/dpkg.log 2>&1; say remove_status $?
        say socket_after_remove "$(systemctl is-active keyholed.socket)"
        say service_after_remove "$(systemctl is-active keyholed.service)"
        say socket_file_after_remove "$(exists /run/keyhole/keyhole.sock)"
        say http_socket_after_remove "$(systemctl is-active keyholed-http.socket)"
        say http_socket_file_after_remove "$(exists /run/keyhole/http.sock)"
        say binary_after_remove "$(exists /usr/bin/keyholed)"
        say state_after_remove "$(exists /var/lib/keyhole/wal)"
        say config_after_remove "$(exists /etc/keyhole/keyholed.toml)"

        # Installed again: the HTTP socket the admin had enabled is enabled and listening again (the
        # removal masked it), and its first request starts keyholed.
        dpkg -i "$new" >>/tmp/dpkg.log 2>&1; say reinstall_status $?
        say http_socket_enabled_after_reinstall "$(systemctl is-enabled keyholed-http.socket)"
        say http_socket_active_after_reinstall "$(systemctl is-active keyholed-http.socket)"
        say http_health_after_reinstall "$(health)"

        dpkg -P keyhole >>/tmp/dpkg.log 2>&1; say purge_status $?
        say state_after_purge "$(exists /var/lib/keyhole)"
        say config_after_purge "$(exists /etc/keyhole)"
        say socket_enabled_after_purge "$(exists /etc/systemd/system/sockets.target.wants/keyholed.socket)"
        say http_socket_enabled_after_purge "$(exists /etc/systemd/system/sockets.target.wants/keyholed-http.socket)"
        say units_masked_after_purge "$(ls /etc/systemd/system | grep -c keyholed)"
        say dpkg_status "$(dpkg-query -W -f='${Status}' keyhole 2>&1 | head -c 40)"
        echo "--- dpkg"; cat /tmp/dpkg.log
        echo "--- client errors during the upgrade"; sort /tmp/load.err | uniq -c
        echo "--- journal"; journalctl -u keyholed.service -o short-monotonic --no-pager | tail -n 40
        """#

    /// Not under `make test-asan`/`test-tsan` (KEYHOLE_SANITIZER set): systemd starts the packaged
    /// service without the sanitizer's options.
    @Test(
        "under systemd (a throwaway container): install enables and starts the socket (the HTTP socket installed, not enabled), the first client starts keyholed; upgrade restarts it under load with both sockets kept and no client error; remove stops them all; a reinstall enables again the HTTP socket the admin enabled; purge deletes state, config and enablement",
        .enabled(if: ProcessInfo.processInfo.environment["KEYHOLE_SANITIZER"] == nil, "the service cannot run a sanitizer build"))
    func lifecycleUnderSystemd() async throws {
        let directory = try DaemonProcess.makeDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        _ = try await Self.build(version: "0.1.0-1", into: directory)
        _ = try await Self.build(version: "0.1.0-2", into: directory)
        let (run, found) = try await Self.runInContainer(
            Self.lifecycle, in: directory, arguments: ["/srv/keyhole-test/keyhole_0.1.0-1.deb", "/srv/keyhole-test/keyhole_0.1.0-2.deb"])
        let expected: [String: String] = [
            "root": "755 root", "pid1": "systemd", "install_status": "0", "binary": "yes",
            "user": "keyhole:/var/lib/keyhole:/usr/sbin/nologin", "group": "keyhole-clients", "proxies_group": "keyhole-proxies",
            "state_dir": "700 keyhole",
            "credentials_dir": "700 root", "config": "yes", "socket_enabled": "enabled", "socket_active": "active",
            "socket_file": "660 keyhole keyhole-clients", "http_socket_enabled": "disabled", "http_socket_active": "inactive",
            "http_socket_file": "no", "service_before_connection": "inactive", "first_ping": "answered",
            "service_after_connection": "active", "service_status": "serving", "service_user": "keyhole",
            "sandbox": "CapEff: 0000000000000000 NoNewPrivs: 1 Seccomp: 2 ", "watchdog": "30s", "credential": "probe-secret", "ready_logged": "1", "token_made": "yes",
            "reload_status": "0", "reload_logged": "1", "watchdog_restarted": "yes", "watchdog_logged": "1", "session_after_watchdog": "yes",
            "upgrade_status": "0", "failed_during_upgrade": "0", "answered_during_upgrade": "yes", "version": "0.1.0-2",
            "config_kept": "1", "service_restarted": "yes", "service_after_upgrade": "active", "socket_kept": "yes",
            "session_after_upgrade": "yes", "curl": "found", "http_health_before_upgrade": "200", "http_socket_enabled_after_upgrade": "enabled",
            "http_socket_kept": "yes", "http_health_after_upgrade": "200", "http_adopted_after_upgrade": "1",
            "remove_status": "0", "socket_after_remove": "inactive", "service_after_remove": "inactive",
            "socket_file_after_remove": "no", "http_socket_after_remove": "inactive", "http_socket_file_after_remove": "no",
            "binary_after_remove": "no", "state_after_remove": "yes", "config_after_remove": "yes",
            "purge_status": "0", "state_after_purge": "no", "config_after_purge": "no", "socket_enabled_after_purge": "no",
            "reinstall_status": "0", "http_socket_enabled_after_reinstall": "enabled", "http_socket_active_after_reinstall": "active",
            "http_health_after_reinstall": "200", "http_socket_enabled_after_purge": "no", "units_masked_after_purge": "0",
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

