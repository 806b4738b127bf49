<?php

// A server that ends connections with keyholed's goodbye (an error with a null id and code
// shutting_down, PROTOCOL.md section 5), or another error with a null id, in the ways keyholed
// can; then answers one request on its last connection.
//
//     php goodbye_server.php SOCKET STEP...
//
// One STEP per connection, in order:
// - goodbye: waits until a request has arrived, says goodbye and closes with it unread (keyholed
//   at shutdown: it drops what it did not read, and the kernel resets the connection).
// - lost: waits until a request has arrived and closes with it unread, saying nothing (a crash).
// - cut: reads a request's header and 4 bytes of it, says goodbye and closes with the rest
//   unread: the client's write of a large request fails part way.
// - idle-goodbye, idle-overloaded: answers one request {"first": true}, waits for a line on stdin
//   (the client is idle by then, so what follows stays in the kernel's buffer), sends the goodbye
//   (or overloaded with retry_after_ms 1000, as keyholed on connect), closes and prints "closed":
//   the client's next write fails.
// - idle-goodbye-open: as idle-goodbye, but prints "said" and closes only once the next request
//   has arrived, unread: the client's write succeeds and it finds the goodbye after it.
// Then it accepts one more connection, reads one request and answers
// {"connection": N (the first is 1), "op": its op, "bytes": its payload's length}, and exits 0
// once the client closes that connection. Prints "ready" once listening.

declare(strict_types=1);

require __DIR__ . '/scripted.php';

const GOODBYE = ['id' => null, 'ok' => false, 'error' => ['code' => 'shutting_down',
    'message' => 'keyholed is shutting down: requests on this connection still unanswered were not read; send them again on a new connection']];
const OVERLOADED = ['id' => null, 'ok' => false, 'error' => ['code' => 'overloaded', 'message' => 'too many connections', 'retry_after_ms' => 1000]];

/** Waits (at most 10 s) until something has arrived on $conn, without reading it; exits 1 if nothing does. */
function arrived($conn, string $what): void
{
    $read = [$conn];
    $none = null;
    if (stream_select($read, $none, $none, 10) !== 1) {
        fwrite(STDERR, "no request on connection $what\n");
        exit(1);
    }
}

[$_, $path] = $argv;
$steps = array_slice($argv, 2);
$server = listen_on($path);
foreach ($steps as $n => $step) {
    $conn = accept_one($server);
    switch ($step) {
        case 'goodbye':
            arrived($conn, (string)($n + 1));
            fwrite($conn, frame(GOODBYE));
            break;
        case 'lost':
            arrived($conn, (string)($n + 1));
            break;
        case 'cut':
            fread($conn, 8);
            fwrite($conn, frame(GOODBYE));
            break;
        case 'idle-goodbye':
        case 'idle-overloaded':
        case 'idle-goodbye-open':
            $first = request($conn);
            fwrite($conn, frame(['id' => $first['id'], 'ok' => true, 'result' => ['first' => true]]));
            fgets(STDIN);
            fwrite($conn, frame($step === 'idle-overloaded' ? OVERLOADED : GOODBYE));
            if ($step === 'idle-goodbye-open') {
                echo "said\n";
                arrived($conn, (string)($n + 1));
            }
            break;
        default:
            fwrite(STDERR, "unknown step $step\n");
            exit(1);
    }
    fclose($conn);
    if ($step === 'idle-goodbye' || $step === 'idle-overloaded') {
        echo "closed\n";
    }
}
$conn = accept_one($server);
$length = unpack('N', fread($conn, 4))[1];
$payload = '';
while (strlen($payload) < $length && !feof($conn)) {
    $payload .= fread($conn, $length - strlen($payload));
}
$request = json_decode($payload, true);
fwrite($conn, frame(['id' => $request['id'], 'ok' => true, 'result' => ['connection' => count($steps) + 1, 'op' => $request['op'], 'bytes' => $length]]));
fread($conn, 1); // until the client closes
unlink($path);
exit(0);
