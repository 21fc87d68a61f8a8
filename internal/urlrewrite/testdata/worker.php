<?php
// A test worker: one command per line on stdin, one answer per line.
//   S <base64 JSON>                      -> base64 of serialize(json_decode(JSON))
//   C <base64 serialized> <base64 JSON>  -> "ok", or "err <why>" when
//      unserialize() fails or its value differs from json_decode(JSON)
// JSON objects decode to stdClass (so objects are tested), lists to arrays.
set_error_handler(function ($no, $str) { throw new ErrorException($str, 0, $no); });

function same($a, $b) {
    if (is_object($a) || is_object($b)) {
        if (!is_object($a) || !is_object($b) || get_class($a) !== get_class($b)) return false;
        return same(get_object_vars($a), get_object_vars($b));
    }
    if (is_array($a) || is_array($b)) {
        if (!is_array($a) || !is_array($b) || count($a) !== count($b)) return false;
        foreach ($a as $k => $v) {
            if (!array_key_exists($k, $b) || !same($v, $b[$k])) return false;
        }
        return true;
    }
    return $a === $b;
}

while (($line = fgets(STDIN)) !== false) {
    $f = explode(' ', rtrim($line, "\n"));
    try {
        if ($f[0] === 'S') {
            echo base64_encode(serialize(json_decode(base64_decode($f[1]), false, 512, JSON_THROW_ON_ERROR))), "\n";
        } elseif ($f[0] === 'C') {
            $got = unserialize(base64_decode($f[1]));
            $want = json_decode(base64_decode($f[2]), false, 512, JSON_THROW_ON_ERROR);
            echo same($got, $want) ? "ok\n" : "err value differs: " . json_encode($got) . "\n";
        } else {
            echo "err unknown command\n";
        }
    } catch (Throwable $e) {
        echo "err ", str_replace("\n", " ", $e->getMessage()), "\n";
    }
}
