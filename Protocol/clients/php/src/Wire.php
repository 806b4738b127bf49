<?php

declare(strict_types=1);

namespace Keyhole;

// Imported so that PHP binds them when it compiles (see Client.php).
use function array_is_list, in_array, is_array, is_int, is_string, json_decode, json_encode, pack, strlen, strncmp, substr;

/**
 * The protocol's messages as bytes (PROTOCOL.md sections 2 to 4): a request's frame, and an
 * answer's payload decoded and checked. Internal to Keyhole\Client.
 *
 * @internal
 */
final class Wire
{
    /** The largest payload a frame may have (PROTOCOL.md section 2). */
    public const MAX_FRAME_BYTES = 16777216;

    private const JSON = JSON_UNESCAPED_SLASHES | JSON_UNESCAPED_UNICODE | JSON_PRESERVE_ZERO_FRACTION | JSON_THROW_ON_ERROR;

    /**
     * A request's frame: 4-byte big-endian length, then the JSON, the bytes json_encode makes of
     * ['v' => 1, 'id' => $id, 'op' => $op, 'args' => $args]. The envelope is written by hand:
     * $id is the client's own (hex digits, a dot, digits) and an operation of PROTOCOL.md is
     * plain ASCII, so neither needs escaping; another operation, and the args, go through
     * json_encode.
     */
    public static function encode(string $id, string $op, array|\stdClass $args): string
    {
        try {
            $json = '{"v":1,"id":"' . $id . '","op":' . (isset(Client::SAFE_TO_REPEAT[$op]) ? '"' . $op . '"' : json_encode($op, self::JSON))
                . ',"args":' . json_encode($args, self::JSON) . '}';
        } catch (\JsonException $e) {
            throw new \InvalidArgumentException("Keyhole\\Client: the arguments of $op cannot be sent as JSON: " . $e->getMessage(), 0, $e);
        }
        if (strlen($json) > self::MAX_FRAME_BYTES) {
            throw new \InvalidArgumentException("Keyhole\\Client: the request for $op is larger than 16 MiB");
        }
        return pack('N', strlen($json)) . $json;
    }

    /**
     * The result of keyholed's usual answer to $id, {"id":"<id>","ok":true,"result":{...}},
     * decoded without parsing and checking its envelope; null for any other payload, which
     * decode() then reads whole. A payload with exactly that beginning, whose last
     * byte is '}' and whose middle decodes, is that answer: the middle is one JSON object, the
     * result. Anything else (other spacing, order or escapes, more members, bad JSON) is left to
     * decode(), so both ways give the same.
     */
    public static function result(string $payload, string $id): ?array
    {
        $head = '{"id":"' . $id . '","ok":true,"result":{';
        $length = strlen($head);
        if (strncmp($payload, $head, $length) !== 0 || $payload[-1] !== '}') {
            return null;
        }
        try {
            // Depth 511: the message around it is the 512th level json_decode allows in decode().
            $result = json_decode(substr($payload, $length - 1, -1), true, 511, JSON_THROW_ON_ERROR);
        } catch (\JsonException) {
            return null;
        }
        return is_array($result) ? $result : null;
    }

    /**
     * An answer's payload as ['id' => ..., 'ok' => true, 'result' => array] or
     * ['id' => ..., 'ok' => false, 'error' => KeyholeException].
     *
     * @throws KeyholeException protocol_error when it is not a response (the caller closes the connection)
     */
    public static function decode(string $payload): array
    {
        try {
            $message = json_decode($payload, true, 512, JSON_THROW_ON_ERROR);
        } catch (\JsonException $e) {
            throw self::protocolError('an answer that is not UTF-8 JSON (' . $e->getMessage() . ')');
        }
        if (!is_array($message) || (($message === [] || array_is_list($message)) && !self::isObject($payload, null))) {
            throw self::protocolError('an answer that is not a JSON object');
        }
        $id = $message['id'] ?? null;
        if ($id !== null && !is_string($id) && !is_int($id)) {
            throw self::protocolError('an answer whose id is neither a string, an integer nor null');
        }
        $ok = $message['ok'] ?? null;
        if ($ok === true) {
            $result = $message['result'] ?? null;
            if (!is_array($result) || (($result === [] || array_is_list($result)) && !self::isObject($payload, 'result'))) {
                throw self::protocolError('an ok answer without a result object');
            }
            return ['id' => $id, 'ok' => true, 'result' => $result];
        }
        if ($ok !== false) {
            throw self::protocolError('an answer whose ok is neither true nor false');
        }
        $error = $message['error'] ?? null;
        if (!is_array($error) || !is_string($error['code'] ?? null)) {
            throw self::protocolError('an error answer without an error object and code');
        }
        $code = in_array($error['code'], KeyholeException::SERVER_CODES, true) ? $error['code'] : 'internal';
        $text = is_string($error['message'] ?? null) ? $error['message'] : '';
        if ($code !== $error['code']) {
            $text = "keyholed answered the unknown code '{$error['code']}'" . ($text === '' ? '' : ": $text");
        }
        $retry = $error['retry_after_ms'] ?? null;
        $apple = $error['apple_error'] ?? null;
        return ['id' => $id, 'ok' => false, 'error' => new KeyholeException(
            $code,
            $text,
            is_int($retry) ? $retry : null,
            is_string($apple) ? $apple : null
        )];
    }

    public static function protocolError(string $what): KeyholeException
    {
        return new KeyholeException('protocol_error', "keyholed sent $what; the connection is closed");
    }

    /**
     * Whether the answer, or its $member, was a JSON object, when it was decoded as an empty or
     * list-shaped array (which either can have been): the payload decoded again, as objects.
     */
    private static function isObject(string $payload, ?string $member): bool
    {
        $message = json_decode($payload, false, 512);
        $object = $member === null ? $message : ($message->$member ?? null);
        return $object instanceof \stdClass;
    }

    /** Empty PHP arrays where the protocol takes an object become objects (json_encode([]) is "[]"). */
    public static function objectify(string $op, array $args): array|\stdClass
    {
        if ($args === []) {
            return new \stdClass();
        }
        if (!isset($args['data']) && !isset($args['name']) && !isset($args['user']) && $op !== 'apple.sign_in' && $op !== 'apple.callback') {
            return $args; // the common case: nothing that may be an empty array to send as {}
        }
        foreach (['data', 'name', 'user'] as $member) {
            if (($args[$member] ?? null) === []) {
                $args[$member] = new \stdClass();
            }
        }
        if ($op === 'apple.callback' && ($args['form'] ?? null) === []) {
            $args['form'] = new \stdClass();
        }
        if (($op === 'apple.sign_in' || $op === 'apple.callback') && is_array($args['session'] ?? null)) {
            $session = $args['session'];
            if (($session['data'] ?? null) === []) {
                $session['data'] = new \stdClass();
            }
            $args['session'] = $session === [] ? new \stdClass() : $session;
        }
        return $args;
    }
}
