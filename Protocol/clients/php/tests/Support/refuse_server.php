<?php

// A server that answers one ping, then says the connection is refused (an error with a null id,
// as keyholed's overloaded on connect) and closes it while the client is idle; prints "closed".
// Then it answers one ping on a new connection with {"reconnected": true}.
//
//     php refuse_server.php SOCKET [on-cue]
//
// With on-cue it sends the refusal only once a line comes on stdin (the client is idle by then:
// the refusal stays in the kernel's buffer, not in PHP's).

declare(strict_types=1);

require __DIR__ . '/scripted.php';

$server = listen_on($argv[1]);
$conn = stream_socket_accept($server, 10);
$ping = request($conn);
fwrite($conn, frame(['id' => $ping['id'], 'ok' => true, 'result' => ['first' => true]]));
if (($argv[2] ?? '') === 'on-cue') {
    fgets(STDIN);
}
fwrite($conn, frame(['id' => null, 'ok' => false, 'error' => ['code' => 'overloaded', 'message' => 'too many connections', 'retry_after_ms' => 1000]]));
fclose($conn);
echo "closed\n";
$conn = stream_socket_accept($server, 10);
if ($conn === false) {
    fwrite(STDERR, "no second connection\n");
    exit(1);
}
$ping = request($conn);
fwrite($conn, frame(['id' => $ping['id'], 'ok' => true, 'result' => ['reconnected' => true]]));
fread($conn, 1);
unlink($argv[1]);
exit(0);
