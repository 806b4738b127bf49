<?php

// What the small scripted servers beside this file share: listening, accepting, and frames.
// Each is run as its own PHP process by a test (Process), and prints "ready" once it listens.

declare(strict_types=1);

/** A message as one frame: its 4-byte big-endian length, then its JSON. */
function frame(array $message): string
{
    $json = json_encode($message);
    return pack('N', strlen($json)) . $json;
}

/** One request frame read from $conn, decoded. */
function request($conn): array
{
    $length = unpack('N', fread($conn, 4))[1];
    return json_decode(fread($conn, $length), true);
}

/** Listens on the Unix socket $path (replacing a stale file), then prints "ready"; exits 1 if it cannot. */
function listen_on(string $path)
{
    @unlink($path);
    $server = stream_socket_server("unix://$path", $errno, $errstr);
    if ($server === false) {
        fwrite(STDERR, "cannot listen: $errstr\n");
        exit(1);
    }
    echo "ready\n";
    return $server;
}

/** The next connection, within 10 s; exits 1 without one. */
function accept_one($server)
{
    $conn = stream_socket_accept($server, 10);
    if ($conn === false) {
        fwrite(STDERR, "no connection\n");
        exit(1);
    }
    return $conn;
}
