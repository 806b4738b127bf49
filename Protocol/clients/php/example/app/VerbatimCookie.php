<?php

declare(strict_types=1);

namespace App;

use Symfony\Component\HttpFoundation\Cookie;

/**
 * A Set-Cookie header value sent exactly as given. Symfony parses a `Set-Cookie` header set on a
 * response and writes it back in its own spelling (`samesite=none`, an `expires` beside
 * `Max-Age`); keyholed's binding cookie goes out as keyholed wrote it instead. The parsed name, path
 * and domain only key it in the response's header bag.
 */
final class VerbatimCookie extends Cookie
{
    private string $header = '';

    public static function of(string $header): self
    {
        if (strpbrk($header, "\r\n\0") !== false) {
            throw new \InvalidArgumentException('a Set-Cookie value is one header line');
        }
        $parsed = Cookie::fromString($header);
        $cookie = new self(
            $parsed->getName(),
            $parsed->getValue(),
            $parsed->getExpiresTime(),
            $parsed->getPath(),
            $parsed->getDomain(),
            $parsed->isSecure(),
            $parsed->isHttpOnly(),
            true,
            $parsed->getSameSite()
        );
        $cookie->header = $header;
        return $cookie;
    }

    public function __toString(): string
    {
        return $this->header;
    }
}
