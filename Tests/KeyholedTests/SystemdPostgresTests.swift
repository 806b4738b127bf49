import Foundation
import KeyholeTestSupport
import Testing

/// keyholed with `[storage] backend = "postgres"` under the shipped units and a real systemd, next to
/// Debian's PostgreSQL under the same systemd (the package installed in a throwaway container, as
/// DebianPackageTests does): the example drop-in packaging/systemd/keyholed-postgres.conf orders
/// keyholed after PostgreSQL and starts it, keyholed logs in over the socket by peer authentication
/// and over TCP with a SCRAM password handed over as a systemd credential, access control holds, and
/// PostgreSQL restarted under a running keyholed neither stops nor restarts it.
@Suite("PostgreSQL under systemd", .serialized, .packagedServiceOnFirstPass, .ownThreads)
struct SystemdPostgresTests {
    /// Runs in the container: prints a `name=value` line per finding (`say` and `as` are
    /// SystemdAccessTests' helpers).
    static let script = SystemdAccessTests.helpers + #"""
        prop() { systemctl show -P "$2" "$1"; }
        deb=$1
        # Debian's PostgreSQL programs as its superuser, over the socket (peer authentication), as an
        # operator runs them with `sudo -u postgres`.
        pg() { runuser -u postgres -- psql -X -q -t -A -v ON_ERROR_STOP=1 -p "$port" -d "${db:-postgres}" -c "$1" 2>&1; }
        # The store backend stats names, asked as root (whom the default policy lets ask stats).
        backend() { /usr/bin/keyhole call stats '{}' 2>&1 | grep -o '"backend":"[^"]*"' | head -n 1 | cut -d'"' -f4; }
        # Until an app's call on the session made earlier is answered again, for at most 20 s (a call
        # keyholed cannot serve yet takes up to [postgres] timeout to answer storage_unavailable).
        until_served() {
            end=$(($(date +%s) + 20))
            until [ "$(as webapp session.get "{\"session\":\"$token\"}")" = ok ] || [ "$(date +%s)" -ge $end ]; do sleep 0.1; done
            as webapp session.get "{\"session\":\"$token\"}"
        }
        # keyholed's connections to PostgreSQL by how they came: "socket" (no client address) or the address.
        connections() { db=keyhole pg "SELECT coalesce(host(client_addr), 'socket') FROM pg_stat_activity WHERE usename = 'keyhole' GROUP BY 1 ORDER BY 1" | paste -sd' ' -; }

        # Units the rest needs active: else the journals now, rather than every later call's timeout.
        needed() {
            for unit; do
                [ "$(systemctl is-active "$unit")" = active ] || { echo "--- $unit is not active: stopped here"; journal; exit 0; }
            done
        }
        journal() {
            echo "--- journal"; journalctl -u keyholed.service -u "postgresql@${cluster:-none}.service" -o short-monotonic --no-pager | tail -n 80
            echo "--- calls"; cat /tmp/as.log 2>/dev/null
        }
        cluster=none

        dpkg -i "$deb" >/tmp/dpkg.log 2>&1; say install_status $?
        useradd --system --no-create-home --groups keyhole-clients webapp
        useradd --system --no-create-home stranger

        # Debian's cluster (15/main on this machine), made by the postgresql package, which also pulls it in
        # from postgresql.service (postgresql-generator, as its start.conf says "auto"). The container shares
        # the host's network: a free port rather than 5432, which a PostgreSQL on the host may hold (Debian's
        # listen_addresses is localhost).
        set -- $(pg_lsclusters -h 2>/dev/null | head -n 1)
        [ $# -ge 2 ] || { say cluster_found "no: apt-get install postgresql (its postinst makes a cluster)"; exit 0; }
        say cluster_found yes
        cluster=$1-$2
        port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
        pg_conftool "$1" "$2" set port "$port"
        say pg_wants_cluster "$(systemctl show -P Wants postgresql.service | tr ' ' '\n' | grep -cx "postgresql@$cluster.service")"
        systemctl start postgresql.service; say pg_start $?
        say pg_active "$(systemctl is-active "postgresql@$cluster.service")"
        needed "postgresql@$cluster.service"

        # The role and database an operator makes for keyholed. The unit runs keyholed as the static
        # user keyhole (User=keyhole, from sysusers; no DynamicUser=, whose name-to-uid mapping changes),
        # so a role of the same name logs in over the socket by peer authentication, Debian's default for
        # local connections: no password anywhere.
        say unit_user "$(prop keyholed.service User)"
        runuser -u postgres -- createuser -p "$port" keyhole; say createuser $?
        runuser -u postgres -- createdb -p "$port" -O keyhole keyhole; say createdb $?

        # keyholed on the socket, as the reference file's commented [postgres] says, with the shipped
        # drop-in installed as the README says.
        sed -i 's/^# backend = "local"$/backend = "postgres"/' /etc/keyhole/keyholed.toml
        say backend_line "$(grep -c '^backend = "postgres"$' /etc/keyhole/keyholed.toml)"
        cat >>/etc/keyhole/keyholed.toml <<EOF
        [postgres]
        url = "/run/postgresql"
        port = $port
        user = "keyhole"
        EOF
        mkdir -p /etc/systemd/system/keyholed.service.d
        cp /usr/share/doc/keyhole/examples/keyholed-postgres.conf /etc/systemd/system/keyholed.service.d/postgres.conf
        systemctl daemon-reload
        say after_postgresql "$(prop keyholed.service After | tr ' ' '\n' | grep -cx postgresql.service)"
        say wants_postgresql "$(prop keyholed.service Wants | tr ' ' '\n' | grep -cx postgresql.service)"
        # PostgreSQL stopped: starting keyholed starts it first (Wants= and After=, through
        # postgresql.service, which the cluster's unit is ordered before).
        systemctl stop postgresql.service "postgresql@$cluster.service"
        say pg_before_start "$(systemctl is-active "postgresql@$cluster.service")"
        systemctl start keyholed.service; say start_status $?
        say active "$(systemctl is-active keyholed.service)"
        needed keyholed.service
        say pg_pulled "$(systemctl is-active "postgresql@$cluster.service")"
        say pg_ordered_first "$([ "$(prop "postgresql@$cluster.service" ActiveEnterTimestampMonotonic)" -le "$(prop keyholed.service ExecMainStartTimestampMonotonic)" ] && echo yes || echo no)"
        say restarts "$(prop keyholed.service NRestarts)"
        say stats_backend "$(backend)"
        token=$(setpriv --reuid webapp --regid webapp --init-groups /usr/bin/keyhole call session.create '{"sub":"u1"}' \
            | sed -n 's/.*"session":"\([^"]*\)".*/\1/p')
        say token_made "$([ -n "$token" ] && echo yes || echo no)"
        say webapp_get "$(as webapp session.get "{\"session\":\"$token\"}")"
        say stranger_get "$(as stranger session.get "{\"session\":\"$token\"}")"
        say stranger_create "$(as stranger session.create '{"sub":"u2"}')"
        say webapp_stats "$(as webapp stats '{}')"
        say rows "$(db=keyhole pg 'SELECT count(*) FROM keyhole.sessions')"
        say connections_socket "$(connections)"

        # PostgreSQL restarted under keyholed: keyholed is not restarted (Wants=, not Requires= or
        # BindsTo=, which would restart or stop it too), reconnects by itself and serves again.
        pid=$(prop keyholed.service MainPID)
        pg_pid=$(prop "postgresql@$cluster.service" MainPID)
        systemctl restart postgresql.service; say pg_restart $?
        say pg_restarted "$([ "$(prop "postgresql@$cluster.service" MainPID)" != "$pg_pid" ] && echo yes || echo no)"
        say get_after_pg_restart "$(until_served)"
        say create_after_pg_restart "$(as webapp session.create '{"sub":"u3"}')"
        say same_pid_after_pg_restart "$([ "$(prop keyholed.service MainPID)" = "$pid" ] && echo yes || echo no)"
        say active_after_pg_restart "$(systemctl is-active keyholed.service)"
        say restarts_after_pg_restart "$(prop keyholed.service NRestarts)"

        # TCP with a password (SCRAM: Debian's pg_hba.conf for 127.0.0.1, and how PostgreSQL stores it).
        # The password in a root-only file: keyhole cannot read it, so password_file fails (78), and systemd
        # hands it over as a credential instead.
        password=$(head -c 18 /dev/urandom | base64 | tr '/+' '_-')
        pg "ALTER ROLE keyhole PASSWORD '$password'" >/dev/null
        say stored_as "$(pg "SELECT split_part(rolpassword, '\$', 1) FROM pg_authid WHERE rolname = 'keyhole'")"
        say hba_tcp "$(pg "SELECT auth_method FROM pg_hba_file_rules WHERE type = 'host' AND address = '127.0.0.1' AND 'all' = ANY(user_name) AND 'all' = ANY(database)")"
        say tcp_without_password "$(PGPASSWORD= psql -X -w -h 127.0.0.1 -p "$port" -U keyhole -d keyhole -c 'SELECT 1' >/dev/null 2>&1 && echo accepted || echo refused)"
        say tcp_with_password "$(PGPASSWORD=$password psql -X -w -h 127.0.0.1 -p "$port" -U keyhole -d keyhole -c 'SELECT 1' >/dev/null 2>&1 && echo accepted || echo refused)"
        (umask 077; printf '%s\n' "$password" >/etc/keyhole/pg-password)
        say password_file_mode "$(stat -c '%a %U' /etc/keyhole/pg-password)"
        say keyhole_reads_password "$(setpriv --reuid keyhole --regid keyhole --init-groups cat /etc/keyhole/pg-password >/dev/null 2>&1 && echo yes || echo no)"
        tcp_postgres() {
            sed -i '/^\[postgres\]$/,$d' /etc/keyhole/keyholed.toml
            cat >>/etc/keyhole/keyholed.toml <<EOF
        [postgres]
        url = "postgres://127.0.0.1:$port/keyhole"
        user = "keyhole"
        $1
        # Loopback: nothing leaves the host, and SCRAM never sends the password.
        tls = "disable"
        EOF
        }
        tcp_postgres 'password_file = "/etc/keyhole/pg-password"'
        systemctl restart keyholed.service >/dev/null 2>&1
        say password_file_start "$(prop keyholed.service ExecMainStatus)"
        systemctl reset-failed keyholed.service

        # The drop-in's credential (as POSTGRES.md has it: a name of the admin's choosing).
        cat >/etc/systemd/system/keyholed.service.d/postgres-password.conf <<'EOF'
        [Service]
        LoadCredential=pg-password:/etc/keyhole/pg-password
        EOF
        systemctl daemon-reload
        tcp_postgres 'password_credential = "pg-password"'
        systemctl restart keyholed.service; say credential_start $?
        say credential_active "$(systemctl is-active keyholed.service)"
        needed keyholed.service
        say credential_file "$(stat -c '%a %U' /run/credentials/keyholed.service/pg-password 2>&1)"
        say credential_backend "$(backend)"
        say credential_get "$(as webapp session.get "{\"session\":\"$token\"}")"
        say credential_create "$(as webapp session.create '{"sub":"u4"}')"
        say credential_stranger "$(as stranger session.get "{\"session\":\"$token\"}")"
        say connections_tcp "$(connections)"

        # The shipped unit's own way, no drop-in: a file in /etc/keyhole/credentials is credential
        # keyhole_<name>, as the reference file's password_credential = "keyhole_pg_password" says.
        rm /etc/systemd/system/keyholed.service.d/postgres-password.conf
        systemctl daemon-reload
        mv /etc/keyhole/pg-password /etc/keyhole/credentials/pg_password
        tcp_postgres 'password_credential = "keyhole_pg_password"'
        systemctl restart keyholed.service; say directory_credential_start $?
        say directory_credential_get "$(as webapp session.get "{\"session\":\"$token\"}")"
        say directory_credential_connections "$(connections)"

        # PostgreSQL restarted again, keyholed on TCP (the cluster's own unit this time).
        pid=$(prop keyholed.service MainPID)
        pg_pid=$(prop "postgresql@$cluster.service" MainPID)
        restarts=$(prop keyholed.service NRestarts)
        systemctl restart "postgresql@$cluster.service"; say tcp_pg_restart $?
        say tcp_pg_restarted "$([ "$(prop "postgresql@$cluster.service" MainPID)" != "$pg_pid" ] && echo yes || echo no)"
        say tcp_get_after_pg_restart "$(until_served)"
        say tcp_create_after_pg_restart "$(as webapp session.create '{"sub":"u5"}')"
        say tcp_same_pid_after_pg_restart "$([ "$(prop keyholed.service MainPID)" = "$pid" ] && echo yes || echo no)"
        say tcp_restarts_after_pg_restart "$(( $(prop keyholed.service NRestarts) - restarts ))"
        journal
        """#

    /// Not under `make test-asan`/`test-tsan` (KEYHOLE_SANITIZER set): systemd starts the packaged
    /// service without the sanitizer's options.
    @Test(
        "under the shipped units with Debian's PostgreSQL: the shipped drop-in orders keyholed after PostgreSQL and starts it; peer authentication over the socket as role keyhole; apps in keyhole-clients create and read sessions, others cannot connect; TCP with a SCRAM password from a systemd credential the keyhole user could not read otherwise; PostgreSQL restarted under keyholed neither stops nor restarts it",
        .enabled(if: ProcessInfo.processInfo.environment["KEYHOLE_SANITIZER"] == nil, "the service cannot run a sanitizer build"))
    func postgresUnderSystemd() async throws {
        let directory = try DaemonProcess.makeDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        _ = try await DebianPackageTests.build(version: "0.1.0-1", into: directory)
        let (run, found) = try await DebianPackageTests.runInContainer(
            Self.script, in: directory, arguments: ["/srv/keyhole-test/keyhole_0.1.0-1.deb"])
        let expected: [String: String] = [
            "install_status": "0", "cluster_found": "yes", "pg_wants_cluster": "1", "pg_start": "0", "pg_active": "active",
            "unit_user": "keyhole", "createuser": "0", "createdb": "0",
            // The socket, peer authentication; keyholed started with PostgreSQL stopped.
            "backend_line": "1", "after_postgresql": "1", "wants_postgresql": "1", "pg_before_start": "inactive",
            "start_status": "0", "active": "active", "pg_pulled": "active", "pg_ordered_first": "yes", "restarts": "0",
            "stats_backend": "postgres", "token_made": "yes", "webapp_get": "ok", "stranger_get": "no_connection",
            "stranger_create": "no_connection", "webapp_stats": "permission_denied", "rows": "1", "connections_socket": "socket",
            // PostgreSQL restarted under keyholed.
            "pg_restart": "0", "pg_restarted": "yes", "get_after_pg_restart": "ok", "create_after_pg_restart": "ok",
            "same_pid_after_pg_restart": "yes", "active_after_pg_restart": "active", "restarts_after_pg_restart": "0",
            // TCP, SCRAM, the password as a credential.
            "stored_as": "SCRAM-SHA-256", "hba_tcp": "scram-sha-256", "tcp_without_password": "refused",
            "tcp_with_password": "accepted", "password_file_mode": "600 root", "keyhole_reads_password": "no",
            "password_file_start": "78", "credential_start": "0", "credential_active": "active",
            "credential_file": "400 keyhole", "credential_backend": "postgres", "credential_get": "ok",
            "credential_create": "ok", "credential_stranger": "no_connection", "connections_tcp": "127.0.0.1",
            "directory_credential_start": "0", "directory_credential_get": "ok", "directory_credential_connections": "127.0.0.1",
            // PostgreSQL restarted under keyholed on TCP.
            "tcp_pg_restart": "0", "tcp_pg_restarted": "yes", "tcp_get_after_pg_restart": "ok", "tcp_create_after_pg_restart": "ok",
            "tcp_same_pid_after_pg_restart": "yes", "tcp_restarts_after_pg_restart": "0",
        ]
        for (key, value) in expected.sorted(by: { $0.key < $1.key }) {
            #expect(found[key] == value, "\(key): \(found[key] ?? "missing")\n\(run.stdout)\(run.stderr)")
        }
        // Nothing leaked out of the throwaway root.
        #expect(!FileManager.default.fileExists(atPath: "/usr/bin/keyholed"))
    }
}
