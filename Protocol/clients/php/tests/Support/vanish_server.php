<?php

// A server that reads one request, then ends its connection without answering (MODE "close") or
// answers it shutting_down (MODE "shutting_down"), and goes away: the socket is removed, so
// nobody listens any more.
//
//     php vanish_server.php SOCKET MODE
//
// Prints "ready" once listening and "gone" once the socket is removed.

declare(strict_types=1);

require __DIR__ . '/scripted.php';

[$_, $path, $mode] = $argv;
$server = listen_on($path);
$conn = accept_one($server);
$length = unpack('N', fread($conn, 4))[1];
$request = json_decode(fread($conn, $length), true);
// Gone first, so that the client's re-send finds nobody listening.
fclose($server);
unlink($path);
if ($mode === 'shutting_down') {
    $answer = json_encode(['id' => $request['id'], 'ok' => false, 'error' => ['code' => 'shutting_down', 'message' => 'keyholed is stopping']]);
    fwrite($conn, pack('N', strlen($answer)) . $answer);
}
fclose($conn);
echo "gone\n";
exit(0);
