"""A spout that emits ``n == 5`` on a stream it never declared."""

from sb_dag_parts import Grouping, Numbers, Sums, Topology


class LooseNumbers(Numbers):
    def next_tuple(self):
        if self.next < self.limit:
            n = self.next
            self.next += self.step
            stream = "elsewhere" if n == 5 else None
            self.emit([n, n % 3], offset=n, stream=stream)


class UndeclaredSpout(Topology):
    numbers = LooseNumbers.spec(par=1)
    sums = Sums.spec(inputs={numbers: Grouping.fields("k")}, par=2)
