<?php

// A server whose answers, in keyholed's usual form, come in pieces: what the client's short read
// (header, then payload) must hand over to its general one.
//
//     php pieces_server.php SOCKET
//
// Prints "ready"; on its first connection answers the first request with its header alone, then
// its payload in two parts; the second with its header in two halves, then its payload; the third
// with its header and 10 bytes of its payload only. Then, when the fourth request comes on that
// connection (the client timed out on the third and kept the connection), the rest of the third
// answer and the fourth's whole; when the connection ends instead (a persistent client closes it
// when it times out mid-frame), it answers the fourth request whole on the next connection.
// Each answer is {"n": N, "connection": 1 or 2, "op": the request's op, "pad": 200 bytes}.
// Between pieces it waits 30 ms, so that the client reads them apart.

declare(strict_types=1);

require __DIR__ . '/scripted.php';

function answer(array $request, int $n, int $connection): string
{
    $result = ['n' => $n, 'connection' => $connection, 'op' => $request['op'], 'pad' => str_repeat('p', 200)];
    return frame(['id' => $request['id'], 'ok' => true, 'result' => $result]);
}

/** Writes $pieces, 30 ms apart. */
function pieces($conn, string ...$pieces): void
{
    foreach ($pieces as $i => $piece) {
        if ($i > 0) {
            usleep(30000);
        }
        fwrite($conn, $piece);
    }
}

[$_, $path] = $argv;
$server = listen_on($path);
$conn = accept_one($server);
$frame = answer(request($conn), 1, 1);
pieces($conn, substr($frame, 0, 4), substr($frame, 4, 100), substr($frame, 104));
$frame = answer(request($conn), 2, 1);
pieces($conn, substr($frame, 0, 2), substr($frame, 2, 2), substr($frame, 4));
$third = answer(request($conn), 3, 1);
fwrite($conn, substr($third, 0, 14));
$head = fread($conn, 4);
if ($head !== false && strlen($head) === 4) {
    $fourth = json_decode(fread($conn, unpack('N', $head)[1]), true);
    pieces($conn, substr($third, 14), answer($fourth, 4, 1));
    fread($conn, 1); // until the client closes
} else {
    fclose($conn);
    $conn = accept_one($server);
    fwrite($conn, answer(request($conn), 4, 2));
    fread($conn, 1);
}
unlink($path);
exit(0);
