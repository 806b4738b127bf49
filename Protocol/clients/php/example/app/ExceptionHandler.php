<?php

declare(strict_types=1);

namespace App;

use Illuminate\Foundation\Exceptions\Handler;
use Symfony\Component\HttpFoundation\Response;
use Symfony\Component\HttpKernel\Exception\HttpExceptionInterface;
use Throwable;

/** Plain-text error pages: this example has no views. */
final class ExceptionHandler extends Handler
{
    public function render($request, Throwable $e)
    {
        if ($e instanceof HttpExceptionInterface) {
            return new Response($e->getMessage() . "\n", $e->getStatusCode(), $e->getHeaders() + ['Content-Type' => 'text/plain; charset=utf-8']);
        }
        return new Response("Internal error.\n", 500, ['Content-Type' => 'text/plain; charset=utf-8']);
    }
}
