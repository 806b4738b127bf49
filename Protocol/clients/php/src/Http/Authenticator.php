<?php

declare(strict_types=1);

namespace Keyhole\Http;

use Keyhole\Client;
use Keyhole\KeyholeException;

/**
 * The middleware contract, framework-free: the session token from `Authorization: Bearer kh_...`
 * if present, else the cookie, read from the Cookie header (never the query string); a value
 * without a token's shape is anonymous and keyholed is not asked; session.get;
 * `session_not_found` (or no credential) is anonymous; any other failure fails closed.
 */
final class Authenticator
{
    public const DEFAULT_COOKIE = 'kh_session';

    public function __construct(
        private readonly Client $client,
        private readonly string $cookie = self::DEFAULT_COOKIE
    ) {
    }

    public function client(): Client
    {
        return $this->client;
    }

    public function cookieName(): string
    {
        return $this->cookie;
    }

    /** Whether a string has a session token's shape: `kh_` and 43 base64url characters. */
    public static function isToken(?string $value): bool
    {
        return $value !== null && strlen($value) === 46 && preg_match('/^kh_[A-Za-z0-9_-]{43}\z/', $value) === 1;
    }

    /**
     * The value of the first cookie named $name in the request's Cookie headers (in order), or
     * null. One linear pass over `name=value` pairs separated by `;`: a pair without `=`, or
     * with spaces, quotes, braces or any other byte in its value, is skipped like any other
     * neighbour and does not hide the cookie; names are compared exactly (PHP's $_COOKIE
     * would turn `kh.session` or `kh session` into `kh_session`, take `kh_session[x]` as an
     * array of that name, and drop every cookie past max_input_vars). A value in double quotes
     * is taken without them.
     *
     * @param list<string>|string $headers
     */
    public static function cookie(array|string $headers, string $name): ?string
    {
        foreach ((array)$headers as $header) {
            foreach (explode(';', $header) as $pair) {
                $eq = strpos($pair, '=');
                if ($eq === false || trim(substr($pair, 0, $eq), " \t") !== $name) {
                    continue;
                }
                $value = trim(substr($pair, $eq + 1), " \t");
                if (strlen($value) >= 2 && $value[0] === '"' && $value[-1] === '"') {
                    $value = substr($value, 1, -1);
                }
                return $value;
            }
        }
        return null;
    }

    /**
     * The credential: a Bearer value starting `kh_`, else the cookie. Whether it has a token's
     * shape is authenticate()'s to check (one that has not is anonymous, and not sent).
     *
     * @param string|null $authorization the Authorization header's value
     * @param list<string>|null $cookieHeaders the request's Cookie headers, parsed with cookie()
     * @param array<string, mixed> $cookies the request's cookies by name, used only when there is
     *                                      no Cookie header (a request made up without one)
     */
    public function credential(?string $authorization, ?array $cookieHeaders, array $cookies = []): ?string
    {
        if ($authorization !== null && preg_match('/^[ \t]*Bearer[ \t]+(kh_[^ \t]*)[ \t]*\z/i', $authorization, $m) === 1) {
            return $m[1];
        }
        $cookie = $cookieHeaders ? self::cookie($cookieHeaders, $this->cookie) : ($cookies[$this->cookie] ?? null);
        return is_string($cookie) && $cookie !== '' ? $cookie : null;
    }

    public function authenticate(?string $token): Authentication
    {
        // A string that cannot be a token (kh_ and 43 base64url characters) is no session:
        // keyholed is not asked.
        if (!self::isToken($token)) {
            return Authentication::anonymous();
        }
        try {
            return Authentication::signedIn($this->client->sessionGet($token));
        } catch (KeyholeException $e) {
            return $e->code() === 'session_not_found' ? Authentication::anonymous() : Authentication::failed($e);
        }
    }

    /** credential() then authenticate(). */
    public function authenticateRequest(?string $authorization, ?array $cookieHeaders, array $cookies = []): Authentication
    {
        return $this->authenticate($this->credential($authorization, $cookieHeaders, $cookies));
    }
}
