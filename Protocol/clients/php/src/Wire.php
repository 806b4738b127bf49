<?php

declare(strict_types=1);

namespace Keyhole;

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

    /** A request's frame: 4-byte big-endian length, then the JSON. */
    public static function encode(string $id, string $op, array|\stdClass $args): string
    {
        try {
            $json = json_encode(['v' => 1, 'id' => $id, 'op' => $op, 'args' => $args],
                JSON_UNESCAPED_SLASHES | JSON_UNESCAPED_UNICODE | JSON_PRESERVE_ZERO_FRACTION | JSON_THROW_ON_ERROR);
        } catch (\JsonException $e) {
            throw new \InvalidArgumentException("Keyhole\\Client: the arguments of $op cannot be sent as JSON: " . $e->getMessage(), 0, $e);
        }
        if (strlen($json) > self::MAX_FRAME_BYTES) {
            throw new \InvalidArgumentException("Keyhole\\Client: the request for $op is larger than 16 MiB");
        }
        return pack('N', strlen($json)) . $json;
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
        if (!is_array($message) || !self::isObject($payload, $message, null)) {
            throw self::protocolError('an answer that is not a JSON object');
        }
        $id = $message['id'] ?? null;
        if ($id !== null && !is_string($id) && !is_int($id)) {
            throw self::protocolError('an answer whose id is neither a string, an integer nor null');
        }
        $ok = $message['ok'] ?? null;
        if ($ok === true) {
            $result = $message['result'] ?? null;
            if (!is_array($result) || !self::isObject($payload, $result, 'result')) {
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
     * Whether a decoded array was a JSON object. Only an empty or list-shaped array can have been
     * either; only then is the payload decoded again, as objects, to tell.
     */
    private static function isObject(string $payload, array $value, ?string $member): bool
    {
        if ($value !== [] && !array_is_list($value)) {
            return true;
        }
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
        foreach (['data', 'name', 'user'] as $member) {
            if (($args[$member] ?? null) === []) {
                $args[$member] = new \stdClass();
            }
        }
        if ($op === 'apple.sign_in' && is_array($args['session'] ?? null)) {
            $session = $args['session'];
            if (($session['data'] ?? null) === []) {
                $session['data'] = new \stdClass();
            }
            $args['session'] = $session === [] ? new \stdClass() : $session;
        }
        return $args;
    }
}
