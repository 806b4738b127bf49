<?php

declare(strict_types=1);

namespace Keyhole\Laravel;

use Illuminate\Contracts\Auth\Authenticatable;

/**
 * The signed-in user as Laravel sees it: a keyholed session (session.get's result) and its user
 * record. Its identifier is "issuer:sub". There is no password or remember token: keyholed's
 * session is the credential.
 */
final class KeyholeUser implements Authenticatable
{
    public function __construct(private readonly array $session)
    {
    }

    /** session.get's whole result. */
    public function session(): array
    {
        return $this->session;
    }

    /** The user record (as user.get answers it), or null. */
    public function user(): ?array
    {
        return is_array($this->session['user'] ?? null) ? $this->session['user'] : null;
    }

    public function sub(): string
    {
        return (string)$this->session['sub'];
    }

    public function issuer(): string
    {
        return (string)$this->session['issuer'];
    }

    /** The session's id (not a secret: it names the session in session.list and session.revoke). */
    public function sessionId(): string
    {
        return (string)$this->session['id'];
    }

    public function getAuthIdentifierName()
    {
        return 'id';
    }

    public function getAuthIdentifier()
    {
        return $this->issuer() . ':' . $this->sub();
    }

    public function getAuthPassword()
    {
        return '';
    }

    public function getRememberToken()
    {
        return null;
    }

    public function setRememberToken($value)
    {
    }

    public function getRememberTokenName()
    {
        return '';
    }
}
