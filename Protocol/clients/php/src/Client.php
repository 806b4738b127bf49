<?php

declare(strict_types=1);

namespace Keyhole;

// Imported so that PHP binds them when it compiles (and turns strlen, is_string and the like
// into opcodes) instead of looking for Keyhole\strlen first on every call.
use function bin2hex, fclose, fread, fwrite, getenv, getmypid, hrtime, in_array, is_array, is_float, is_int, is_resource, is_string,
    min, random_bytes, stream_get_meta_data, stream_set_blocking, stream_set_chunk_size, stream_set_timeout,
    stream_set_write_buffer, stream_socket_client, stream_socket_shutdown, strlen, substr, unpack, usleep;

/**
 * A blocking client for keyholed (PROTOCOL.md), PHP 8.1+, standard library only.
 *
 * One connection, one call at a time (PHP workers are single-threaded: this client never
 * pipelines). The connection opens on the first call and is reused; with
 * ['persistent' => true] it outlives the request under PHP-FPM (STREAM_CLIENT_PERSISTENT).
 * Every connection a Client takes, new or reused, gets a fresh random id prefix, so an answer
 * an earlier request left on a persistent socket is never taken for this one's.
 *
 * Options: 'timeout' (seconds per call, default 5.0: connecting, waiting to reconnect, writing
 * and the answer), 'persistent' (bool, default false), 'retry_overloaded' (bool, default
 * false: wait out `overloaded` within the deadline instead of throwing it).
 */
final class Client
{
    use Operations;

    public const DEFAULT_SOCKET = '/run/keyhole/keyhole.sock';

    /** The largest response payload a client must accept (PROTOCOL.md section 2). */
    public const MAX_FRAME_BYTES = Wire::MAX_FRAME_BYTES;

    /**
     * Every operation of PROTOCOL.md section 7 and whether it is safe to send again after the
     * connection dropped with it written but unanswered (a copy of ../../ops.json, checked by
     * OpsTableTest). An operation not listed is not safe.
     */
    public const SAFE_TO_REPEAT = [
        'ping' => true,
        'stats' => true,
        'token.verify' => true,
        'jwks.status' => true,
        'jwks.refresh' => false,
        'session.create' => false,
        'session.get' => true,
        'session.revoke' => true,
        'session.revoke_all' => false,
        'session.list' => true,
        'user.get' => true,
        'user.update' => false,
        'user.delete' => false,
        'apple.sign_in' => false,
        'apple.notification' => false,
        'apple.refresh_check' => false,
        'apple.transfer.export' => false,
        'apple.transfer.import' => false,
        'apple.pending' => true,
        'apple.authorize' => false,
        'apple.callback' => false,
        'admin.snapshot' => false,
        'admin.reload' => false,
        'debug.sleep' => true,
        'debug.echo' => true,
        'debug.block' => false,
        'debug.advance_clock' => false,
    ];

    private const UNSENT = 0;
    private const WRITTEN = 1;
    private const PARTLY_WRITTEN = 2;
    private const BACKOFF_FIRST = 0.010;
    private const BACKOFF_MAX = 0.500;
    /** PHP's chunk size for a socket stream it has just opened; this client sets CHUNK_SIZE. */
    private const PHP_CHUNK_SIZE = 8192;
    private const CHUNK_SIZE = 65536;

    private string $path;
    private float $timeout;
    /** $timeout in nanoseconds, for hrtime(). */
    private int $timeoutNs;
    private bool $persistent;
    private bool $retryOverloaded;

    /** @var resource|null */
    private $stream = null;
    /** The id prefix and its dot: "<12 hex digits>." */
    private string $prefix = '';
    private int $counter = 0;
    /**
     * The process that opened the connection. After a fork (pcntl_fork, a Swoole or Workerman
     * server forking its workers) parent and child would share it, with the same ids, and read
     * each other's answers: a call could be handed another's session. The child opens its own.
     */
    private int $pid = 0;
    /**
     * The process that opened each persistent socket (by path) this process holds: a child
     * inherits its parent's persistent sockets, and PHP would hand them back to it.
     *
     * @var array<string, int>
     */
    private static array $persistentOwners = [];
    /** Bytes of a frame read in part when a call timed out (non-persistent connections only). */
    private string $buffer = '';
    /**
     * Whether what is read on the connection is about this Client's requests: it opened the
     * socket itself, or an answer to one of its ids has come on it. A persistent socket that PHP
     * hands back (an earlier request's, or another Client's in this process) may hold what was
     * sent to others before, an error with a null id among it: until then such an error is not
     * taken as about this call.
     */
    private bool $own = false;
    /** An error with a null id read on this connection (rule 4): nothing more is sent on it. */
    private ?KeyholeException $refused = null;

    /**
     * @param string|null $socket the socket's path; else $KEYHOLE_SOCKET, else /run/keyhole/keyhole.sock
     * @param array{timeout?: int|float, persistent?: bool, retry_overloaded?: bool} $options
     */
    public function __construct(?string $socket = null, array $options = [])
    {
        $env = getenv('KEYHOLE_SOCKET');
        $this->path = $socket ?? (is_string($env) && $env !== '' ? $env : self::DEFAULT_SOCKET);
        foreach ($options as $name => $_) {
            if (!in_array($name, ['timeout', 'persistent', 'retry_overloaded'], true)) {
                throw new \InvalidArgumentException("Keyhole\\Client: unknown option '$name'");
            }
        }
        $timeout = $options['timeout'] ?? 5.0;
        if (!is_int($timeout) && !is_float($timeout) || $timeout <= 0) {
            throw new \InvalidArgumentException('Keyhole\\Client: timeout must be a positive number of seconds');
        }
        $this->timeout = (float)$timeout;
        $this->timeoutNs = (int)($this->timeout * 1e9);
        $this->persistent = (bool)($options['persistent'] ?? false);
        $this->retryOverloaded = (bool)($options['retry_overloaded'] ?? false);
    }

    public function __destruct()
    {
        if (!$this->persistent) {
            $this->close();
        }
    }

    /** The socket path this client connects to. */
    public function socketPath(): string
    {
        return $this->path;
    }

    /**
     * Closes the connection (a persistent one too); the next call opens a new one.
     */
    public function close(): void
    {
        if ($this->stream !== null && $this->pid !== getmypid()) {
            // A forked child's copy of its parent's connection: a shutdown would end it for the
            // parent too (this runs from the destructor when the child exits).
            $this->abandon();
            return;
        }
        if ($this->stream !== null) {
            $stream = $this->stream;
            $this->stream = null;
            if (is_resource($stream)) {
                @stream_socket_shutdown($stream, STREAM_SHUT_RDWR);
                @fclose($stream);
            }
        }
        $this->buffer = '';
        $this->own = false;
        $this->refused = null;
    }

    /**
     * Sends one request and returns its result object as an array.
     *
     * An empty PHP array for $args, and for a `data`, `name` or `user` member (and the `session`
     * of apple.sign_in and apple.callback and its `data`, and apple.callback's `form`), is sent as
     * a JSON object. Elsewhere pass (object)[] or new \stdClass for an empty object.
     *
     * @throws KeyholeException keyholed's error, or the client's own: unavailable, connection_lost,
     *                          timeout, protocol_error
     * @throws \InvalidArgumentException args that cannot be encoded as JSON (nothing was sent)
     */
    public function call(string $op, array $args = []): array
    {
        $deadline = hrtime(true) + $this->timeoutNs;
        $safe = self::SAFE_TO_REPEAT[$op] ?? false;
        $args = Wire::objectify($op, $args);
        $resent = false;  // the one re-send of a written request has been used
        $written = false; // an attempt of this call may have been read: its effect may be unknown
        $unsent = 0;      // attempts that never reached keyholed (rule 1, or turned away by a goodbye)
        while (true) {
            if ($this->stream !== null && $this->pid !== getmypid()) {
                $this->abandon();
            }
            if ($this->stream === null || !is_resource($this->stream)) {
                $this->close(); // another Client sharing the persistent socket may have closed it
                $this->connect($deadline, $op, $written);
            }
            $id = $this->prefix . ++$this->counter;
            $frame = Wire::encode($id, $op, $args);
            $state = $this->write($frame, $deadline, $op, $written);
            $answer = $state === self::WRITTEN ? $this->await($id, $deadline, $op) : $this->leftBehind($state);
            if ($answer === self::UNSENT) {
                // Rule 1: nothing of it went out, the connection was found closed. Or rule 3's
                // goodbye: keyholed said it stopped reading before this request, which it never
                // read. Either way it never reached keyholed, so it goes on a new connection
                // whatever its operation, and this is not rule 2's one re-send: a call turned away
                // by several restarts in a row goes again each time, within its deadline. The same
                // backoff as reconnecting, from the second attempt on.
                $this->close();
                if (++$unsent > 1) {
                    $this->pause(min(self::BACKOFF_FIRST * 2 ** ($unsent - 2), self::BACKOFF_MAX), $deadline);
                }
                continue;
            }
            if ($state !== self::UNSENT) {
                $written = true;
            }
            if ($answer === null) {
                // Rule 2: written, and the connection ended before its answer.
                $this->close();
                if ($safe && !$resent) {
                    $resent = true;
                    continue;
                }
                throw new KeyholeException('connection_lost', $resent
                    ? "the connection to keyholed ended twice before answering $op; it may or may not have taken effect"
                    : "the connection to keyholed ended before answering $op; it may or may not have taken effect");
            }
            if (is_array($answer)) {
                return $answer;
            }
            $error = $answer;
            if ($error->code() === 'shutting_down') {
                // Rule 3, answered with its id: read and not completed; sent again like rule 2's
                // lost request. Nothing more goes on this connection.
                $this->close();
                if ($safe && !$resent) {
                    $resent = true;
                    continue;
                }
            }
            if ($error->code() === 'overloaded' && $this->retryOverloaded && $error->retryAfterMs() !== null) {
                // Rule 5, when asked: the request had no effect; wait and try again within the deadline.
                $wait = $error->retryAfterMs() / 1000;
                if (hrtime(true) + (int)($wait * 1e9) < $deadline) {
                    usleep((int)($wait * 1e6));
                    continue;
                }
            }
            throw $error;
        }
    }

    /**
     * In the child of a fork: lets go of the parent's connection. Only this process's descriptor
     * is closed; close() would shut the connection down for the parent too.
     */
    private function abandon(): void
    {
        if (is_resource($this->stream)) {
            @fclose($this->stream);
        }
        $this->stream = null;
        $this->buffer = '';
        $this->own = false;
        $this->refused = null;
    }

    /** @return resource|null the connection's stream, for tests and diagnostics */
    public function stream()
    {
        return $this->connected() ? $this->stream : null;
    }

    /**
     * Whether this Client has a connection. A persistent socket is shared by every Client of the
     * process on the same path (PHP keys them by address): when another one closed it, the stream
     * this one holds is no longer a resource, and this Client has no connection either.
     */
    private function connected(): bool
    {
        if ($this->stream !== null && !is_resource($this->stream)) {
            $this->close();
        }
        return $this->stream !== null;
    }

    private function connect(int $deadline, string $op, bool $written): void
    {
        $delay = self::BACKOFF_FIRST;
        $flags = STREAM_CLIENT_CONNECT | ($this->persistent ? STREAM_CLIENT_PERSISTENT : 0);
        while (true) {
            $remaining = ($deadline - hrtime(true)) / 1e9;
            if ($remaining <= 0) {
                $why = "keyholed could not be reached at {$this->path} before the deadline" . (isset($reason) ? " ($reason)" : '');
                if ($written) {
                    // An attempt went out before (section 8's table: unavailable is never sent).
                    throw new KeyholeException('connection_lost', "the connection to keyholed ended before answering $op, and $why to send it again; it may or may not have taken effect");
                }
                throw new KeyholeException('unavailable', "$why; $op was not sent");
            }
            $errno = 0;
            $errstr = '';
            $stream = @stream_socket_client('unix://' . $this->path, $errno, $errstr, $remaining, $flags);
            if ($stream !== false && $this->persistent && (self::$persistentOwners[$this->path] ?? getmypid()) !== getmypid()) {
                // PHP handed back the persistent socket a parent process opened before it forked:
                // this process lets go of its copy (no shutdown, which would end the parent's) and
                // opens its own.
                @fclose($stream);
                $stream = @stream_socket_client('unix://' . $this->path, $errno, $errstr, $remaining, $flags);
            }
            if ($stream !== false && $this->persistent) {
                self::$persistentOwners[$this->path] = getmypid();
            }
            if ($stream !== false) {
                stream_set_write_buffer($stream, 0);
                // A socket PHP opened just now has its default chunk size; one this client set up
                // before is a persistent socket PHP handed back, with whatever was left on it.
                $this->own = stream_set_chunk_size($stream, self::CHUNK_SIZE) === self::PHP_CHUNK_SIZE || !$this->persistent;
                $this->stream = $stream;
                $this->buffer = '';
                $this->refused = null;
                $this->prefix = bin2hex(random_bytes(6)) . '.';
                $this->counter = 0;
                $this->pid = getmypid();
                return;
            }
            $reason = $errstr !== '' ? $errstr : "error $errno";
            $this->pause($delay, $deadline);
            $delay = min($delay * 2, self::BACKOFF_MAX);
        }
    }

    private function pause(float $seconds, int $deadline): void
    {
        $remaining = ($deadline - hrtime(true)) / 1e9;
        $seconds = min($seconds, $remaining);
        if ($seconds > 0) {
            usleep((int)($seconds * 1e6));
        }
    }

    /** Sets the stream's timeout to what is left of the deadline; false when nothing is. */
    private function arm(int $deadline): bool
    {
        $left = $deadline - hrtime(true);
        if ($left <= 0) {
            return false;
        }
        // In microseconds, rounded up (PHP carries whole seconds over itself).
        stream_set_timeout($this->stream, 0, (int)(($left + 999) / 1000));
        return true;
    }

    /**
     * Writes the whole frame: WRITTEN; UNSENT when the connection was found closed before a byte
     * of it went out; PARTLY_WRITTEN when it ended after some. A timeout throws (and closes the
     * connection when part of the frame went out: its framing is lost).
     */
    private function write(string $frame, int $deadline, string $op, bool $written): int
    {
        $total = strlen($frame);
        $done = 0;
        while ($done < $total) {
            if (!$this->arm($deadline)) {
                $this->writeTimedOut($done, $op, $written);
            }
            $n = @fwrite($this->stream, $done === 0 ? $frame : substr($frame, $done));
            if ($n === false || $n === 0) {
                if (stream_get_meta_data($this->stream)['timed_out']) {
                    $this->writeTimedOut($done, $op, $written);
                }
                return $done === 0 ? self::UNSENT : self::PARTLY_WRITTEN;
            }
            $done += $n;
        }
        return self::WRITTEN;
    }

    private function writeTimedOut(int $done, string $op, bool $written): never
    {
        if ($done > 0) {
            $this->close();
        }
        throw new KeyholeException('timeout', "the deadline passed while $op was being written (keyholed is not reading)"
            . ($written ? '; an earlier attempt of it went out, so it may or may not have taken effect' : ''));
    }

    /**
     * Reads frames until the answer with $id: its result, or its error; null when the connection
     * ended first; UNSENT when keyholed said goodbye first.
     *
     * Rule 3: the goodbye (`shutting_down` with a null id) is the last frame keyholed sends on a
     * connection, after the answers to everything it read: the request was never read. That
     * holds on a persistent socket PHP handed back too (the goodbye is about every request on the
     * connection, whoever sent it), so it is taken whether or not the connection is this
     * Client's own. The connection is closed.
     *
     * Rule 4: after another error with a null id keyholed still answers the requests it had read,
     * then closes; the call gets its answer if it comes, else that error when the connection ends.
     * The connection is closed either way.
     */
    private function await(string $id, int $deadline, string $op): array|KeyholeException|int|null
    {
        while (true) {
            $payload = $this->readFrame($deadline, $op);
            if ($payload === null) {
                $refused = $this->refused;
                if ($refused !== null) {
                    $this->close();
                }
                return $refused;
            }
            $answer = Wire::result($payload, $id);
            if ($answer === null) {
                try {
                    $message = Wire::decode($payload);
                } catch (KeyholeException $e) {
                    $this->close(); // protocol_error
                    throw $e;
                }
                if ($message['id'] !== $id) {
                    if ($message['id'] === null && !$message['ok']) {
                        if ($message['error']->code() === 'shutting_down') {
                            $this->close(); // the goodbye: nothing more is sent on it
                            return self::UNSENT;
                        }
                        if ($this->own) {
                            $this->refused ??= $message['error'];
                        }
                    }
                    // An answer to an id this call does not wait for (an earlier call's, late),
                    // or an error with a null id that may have been about what others sent on a
                    // persistent socket before this Client took it: dropped. The call waits for
                    // its answer or the end.
                    continue;
                }
                $answer = $message['ok'] ? $message['result'] : $message['error'];
            }
            $this->own = true;
            if ($this->refused !== null) {
                $this->close(); // rule 4: keyholed closes it
            }
            return $answer;
        }
    }

    /**
     * On a connection found closed while a request was being written, before a byte of it went
     * out ($state UNSENT) or after some (PARTLY_WRITTEN): what became of it, from what keyholed
     * left on the connection before closing.
     *
     * - Its goodbye (rule 3): the request was never read, whatever of it went out: UNSENT.
     * - Another error with a null id (overloaded on connect), before the request went out: that
     *   error is the call's (rule 4). Only on a socket this Client opened itself (or has had
     *   answers on): on a persistent socket PHP handed back it may be a stale one, left there
     *   for an earlier request, and the request is then sent on a new connection like any other
     *   that was not sent (rule 1).
     * - Otherwise UNSENT when nothing of it went out (rule 1), null when part of it did (rule 2:
     *   the connection ended with the request cut short, and keyholed did not say it was unread).
     *
     * The connection is closed.
     */
    private function leftBehind(int $state): KeyholeException|int|null
    {
        $error = $this->nullIdError();
        $own = $this->own;
        $this->close();
        if ($error !== null && $error->code() === 'shutting_down') {
            return self::UNSENT;
        }
        if ($state !== self::UNSENT) {
            return null;
        }
        return $error !== null && $own ? $error : self::UNSENT;
    }

    /**
     * The first error with a null id among what is left to read on a connection found closed
     * (what fill() left in the buffer, PHP's stream buffer, the kernel's), or null. Frames with an
     * id are late answers to earlier calls, skipped. Reads without blocking: keyholed has closed.
     */
    private function nullIdError(): ?KeyholeException
    {
        $data = $this->buffer;
        stream_set_blocking($this->stream, false);
        while (strlen($data) < 65536 && is_string($chunk = @fread($this->stream, 65536)) && $chunk !== '') {
            $data .= $chunk;
        }
        try {
            while (strlen($data) >= 4) {
                $length = unpack('N', $data)[1];
                if ($length === 0 || strlen($data) < 4 + $length) {
                    return null;
                }
                $answer = Wire::decode(substr($data, 4, $length));
                if ($answer['id'] === null && !$answer['ok']) {
                    return $answer['error'];
                }
                $data = substr($data, 4 + $length);
            }
        } catch (KeyholeException) {
            // Not a response: the connection is gone either way.
        }
        return null;
    }

    /** One frame's payload, or null at end of stream (or a reset). */
    private function readFrame(int $deadline, string $op): ?string
    {
        if ($this->buffer === '' && $this->arm($deadline)) {
            // The common case, no part of a frame read before: the header, then the payload,
            // which PHP's stream buffer holds already when the frame came in one piece. Anything
            // short (a frame in pieces, the end, a timeout, a bad length) goes on below with what
            // was read, as if fill had read it.
            $head = @fread($this->stream, 4);
            if (is_string($head) && strlen($head) === 4) {
                $length = unpack('N', $head)[1];
                if ($length > 0 && $length <= self::MAX_FRAME_BYTES && $this->arm($deadline)) {
                    $payload = @fread($this->stream, $length);
                    if (is_string($payload) && strlen($payload) === $length) {
                        return $payload;
                    }
                    $head .= (string)$payload;
                }
            }
            $this->buffer = (string)$head;
        }
        if (!$this->fill(4, $deadline, $op)) {
            return null;
        }
        $length = unpack('N', $this->buffer)[1];
        if ($length === 0 || $length > self::MAX_FRAME_BYTES) {
            $this->close();
            throw Wire::protocolError("a frame of length $length (1 to " . self::MAX_FRAME_BYTES . ' allowed)');
        }
        if (!$this->fill(4 + $length, $deadline, $op)) {
            return null;
        }
        $payload = substr($this->buffer, 4, $length);
        $this->buffer = (string)substr($this->buffer, 4 + $length);
        return $payload;
    }

    /** Reads until the buffer holds $size bytes; false at end of stream. Never reads past $size. */
    private function fill(int $size, int $deadline, string $op): bool
    {
        while (($have = strlen($this->buffer)) < $size) {
            if (!$this->arm($deadline)) {
                $this->readTimedOut($op);
            }
            $chunk = @fread($this->stream, $size - $have);
            if ($chunk !== false && $chunk !== '') {
                $this->buffer .= $chunk;
                continue;
            }
            $meta = stream_get_meta_data($this->stream);
            if ($meta['timed_out']) {
                $this->readTimedOut($op);
            }
            if ($chunk === false || $meta['eof']) {
                // fread is false on a socket error (ECONNRESET: the peer closed with data of ours
                // unread), '' at a clean end of stream: either way the connection is over.
                return false;
            }
        }
        return true;
    }

    private function readTimedOut(string $op): never
    {
        if (($this->buffer !== '' && $this->persistent) || $this->refused !== null) {
            // A persistent socket outlives this object and its buffer: part of a frame left
            // read would leave the next request reading from mid-frame. And after an error with
            // a null id nothing more is sent on the connection (rule 4).
            $this->close();
        }
        throw new KeyholeException('timeout', "keyholed did not answer $op within the deadline; it may or may not have taken effect");
    }
}
