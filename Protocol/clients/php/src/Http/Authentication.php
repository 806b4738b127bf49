<?php

declare(strict_types=1);

namespace Keyhole\Http;

use Keyhole\KeyholeException;

/**
 * What a request's credential came to: signed in (the session, and its user or null),
 * anonymous (no credential, or keyholed knows no such session), or failed (keyholed could not
 * say: answer 503, never treat the request as signed in).
 */
final class Authentication
{
    private function __construct(
        private readonly ?array $session,
        private readonly ?KeyholeException $failure
    ) {
    }

    public static function signedIn(array $session): self
    {
        return new self($session, null);
    }

    public static function anonymous(): self
    {
        return new self(null, null);
    }

    public static function failed(KeyholeException $failure): self
    {
        return new self(null, $failure);
    }

    public function isSignedIn(): bool
    {
        return $this->session !== null;
    }

    public function isAnonymous(): bool
    {
        return $this->session === null && $this->failure === null;
    }

    public function hasFailed(): bool
    {
        return $this->failure !== null;
    }

    /** session.get's whole result, when signed in. */
    public function session(): ?array
    {
        return $this->session;
    }

    /** The session's user record (session.get's `user`), which may be null even when signed in. */
    public function user(): ?array
    {
        $user = $this->session['user'] ?? null;
        return is_array($user) ? $user : null;
    }

    public function failure(): ?KeyholeException
    {
        return $this->failure;
    }
}
