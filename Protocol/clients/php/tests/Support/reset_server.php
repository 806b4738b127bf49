<?php

// A server that closes connections with the client's request unread (the kernel then resets
// them, as when keyholed stops with a request it never read), then answers one request.
//
//     php reset_server.php SOCKET RESETS
//
// Prints "ready"; for each of RESETS connections waits until the request has arrived, closes
// without reading it; then accepts one more, reads one request and answers {"reset": RESETS}.

declare(strict_types=1);

require __DIR__ . '/scripted.php';

[$_, $path, $resets] = $argv;
$server = listen_on($path);
for ($n = 0; $n < (int)$resets; $n++) {
    $conn = stream_socket_accept($server, 10);
    $read = [$conn];
    $none = null;
    if ($conn === false || stream_select($read, $none, $none, 10) !== 1) {
        fwrite(STDERR, "no request on connection $n\n");
        exit(1);
    }
    fclose($conn);
}
$conn = stream_socket_accept($server, 10);
if ($conn === false) {
    fwrite(STDERR, "no last connection\n");
    exit(1);
}
$length = unpack('N', fread($conn, 4))[1];
$request = json_decode(fread($conn, $length), true);
$answer = json_encode(['id' => $request['id'], 'ok' => true, 'result' => ['reset' => (int)$resets, 'op' => $request['op']]]);
fwrite($conn, pack('N', strlen($answer)) . $answer);
fread($conn, 1); // until the client closes
unlink($path);
exit(0);
