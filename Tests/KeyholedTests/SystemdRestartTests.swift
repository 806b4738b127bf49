import Foundation
import KeyholeTestSupport
import Testing

/// `systemctl restart keyholed` under the shipped units and a real systemd (the package installed in
/// a throwaway container, as DebianPackageTests does), seen from an app: its pooled client keeps
/// creating sessions, changes that are not safe to repeat, and none may fail. keyholed answers what
/// it read and says goodbye on each connection; the client sends what it did not read again; the
/// socket, held by keyholed.socket, keeps new connections in its backlog for the next keyholed.
@Suite("restart under systemd", .serialized, .packagedServiceOnFirstPass, .ownThreads)
struct SystemdRestartTests {
    /// The app, run as a member of keyhole-clients: creates sessions on one client (one connection,
    /// kept) until told to stop, counting those created in a file the script polls, then checks each
    /// sub has exactly the session its create returned.
    static let app = #"""
        import os
        import sys

        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import keyhole  # noqa: E402

        run = sys.argv[1]
        client = keyhole.Client()
        created, failed = {}, []
        n = 0
        while not os.path.exists(os.path.join(run, "stop")):
            sub = f"restart-{n}"
            n += 1
            try:
                created[sub] = client.create_session(sub)["id"]
            except keyhole.KeyholeError as e:
                failed.append(f"{sub} {e.code}")
            with open(os.path.join(run, "count.tmp"), "w") as f:
                f.write(str(len(created)))
            os.replace(os.path.join(run, "count.tmp"), os.path.join(run, "count"))
        once = all([s["id"] for s in client.list_sessions(sub)] == [id] for sub, id in created.items())
        client.close()
        with open(os.path.join(run, "result"), "w") as f:
            f.write(f"creates={len(created)}\nfailed={len(failed)}\nfailures={' '.join(failed[:3])}\n")
            f.write(f"each_once={'yes' if once else 'no'}\n")
        """#

    /// Runs in the container: prints a `name=value` line per finding.
    static let script = #"""
        set -u
        say() { printf '%s=%s\n' "$1" "$2"; }
        dpkg -i "$1" >/tmp/dpkg.log 2>&1; say install_status $?
        useradd --system --no-create-home --groups keyhole-clients webapp
        mkdir -p /tmp/app /tmp/run
        cp /srv/keyhole-test/keyhole.py /srv/keyhole-test/keyhole_operations.py /srv/keyhole-test/app.py /tmp/app/
        chmod -R a+rX /tmp/app
        chown webapp /tmp/run
        setpriv --reuid webapp --regid webapp --init-groups /usr/bin/python3 /tmp/app/app.py /tmp/run >/tmp/app.log 2>&1 &
        app=$!
        count() { cat /tmp/run/count 2>/dev/null || echo 0; }
        # Until the app has created `$1` more sessions (polled; at most 60 s, and not once it has ended).
        more() {
            target=$(($(count) + $1)) i=0
            until [ "$(count)" -ge $target ]; do
                [ $i -ge 1200 ] && return 1
                kill -0 $app 2>/dev/null || return 2
                sleep 0.05; i=$((i + 1))
            done
        }
        restarts=0
        for n in 1 2 3; do
            more 25 || break
            pid=$(systemctl show -P MainPID keyholed.service)
            systemctl restart keyholed.service || break
            [ "$(systemctl show -P MainPID keyholed.service)" != "$pid" ] && restarts=$((restarts + 1))
        done
        say restarts $restarts
        more 25; say creates_after "$?"
        touch /tmp/run/stop
        wait $app; say app_status $?
        cat /tmp/run/result 2>/dev/null
        # Each restart stopped keyholed gracefully (polled: the journal takes an entry a moment after).
        drains() { journalctl -u keyholed.service KEYHOLE_EVENT=server.draining -o cat --no-pager | wc -l; }
        i=0
        until [ "$(drains)" -ge 3 ] || [ $i -ge 100 ]; do sleep 0.1; i=$((i + 1)); done
        say graceful "$(drains)"
        echo "--- app"; cat /tmp/app.log
        echo "--- journal"; journalctl -u keyholed.service -o short-monotonic --no-pager | tail -n 40
        """#

    @Test(
        "systemctl restart keyholed, three times, while an app's pooled client creates sessions: every create succeeds, each applied once",
        .enabled(if: ProcessInfo.processInfo.environment["KEYHOLE_SANITIZER"] == nil, "the service cannot run a sanitizer build"))
    func createsAcrossRestarts() async throws {
        let directory = try DaemonProcess.makeDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        _ = try await DebianPackageTests.build(version: "0.1.0-1", into: directory)
        let client = ScriptProcess.repositoryRoot.appendingPathComponent("Protocol/clients/python")
        for file in ["keyhole.py", "keyhole_operations.py"] {
            try FileManager.default.copyItem(at: client.appendingPathComponent(file), to: directory.appendingPathComponent(file))
        }
        try Self.app.write(to: directory.appendingPathComponent("app.py"), atomically: true, encoding: .utf8)
        let (run, found) = try await DebianPackageTests.runInContainer(
            Self.script, in: directory, arguments: ["/srv/keyhole-test/keyhole_0.1.0-1.deb"])
        let expected: [String: String] = [
            "install_status": "0", "restarts": "3", "creates_after": "0", "app_status": "0",
            "failed": "0", "failures": "", "each_once": "yes", "graceful": "3",
        ]
        for (key, value) in expected.sorted(by: { $0.key < $1.key }) {
            #expect(found[key] == value, "\(key): \(found[key] ?? "missing")\n\(run.stdout)\(run.stderr)")
        }
        let creates = Int(found["creates"] ?? "") ?? 0
        #expect(creates >= 100, "creates: \(creates)")
        print("restart under systemd: \(creates) creates across \(found["restarts"] ?? "?") restarts, \(found["failed"] ?? "?") failed")
    }
}
